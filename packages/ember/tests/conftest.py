import logging
import os

# Tests look at what each compile makes (artifacts, logs, kernel counts): they compile cold.
# The warm-start tests turn it on for themselves, with a cache folder of their own.
os.environ.setdefault("EMBER_WARM_START", "0")

import pytest

import dynamo_capture


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts from the default stance and silent logs."""
    yield
    dynamo_capture.set_stance("default")
    for name in ("ember",):
        logging.getLogger(name).setLevel(logging.WARNING)
