import logging
import os
import shutil

import pytest

import dynamo_capture


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts from the default stance and silent logs."""
    yield
    dynamo_capture.set_stance("default")
    for name in ("ember",):
        logging.getLogger(name).setLevel(logging.WARNING)


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a Chromium (or Chrome) binary for headless page tests; skips without one.

    $EMBER_CHROMIUM names one explicitly. CI installs Debian's `chromium` package.
    """
    explicit = os.environ.get("EMBER_CHROMIUM")
    found = explicit if explicit and os.access(explicit, os.X_OK) else None
    for name in () if found else CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            break
    if found is None:
        pytest.skip(
            "no Chromium for the browser test: install it (`apt-get install -y chromium` on "
            f"Debian/Ubuntu) or set EMBER_CHROMIUM; looked for {', '.join(CHROMIUM_NAMES)}"
        )
    return found
