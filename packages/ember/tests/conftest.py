import logging

import pytest

import dynamo_capture


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts from the default stance and silent logs."""
    yield
    dynamo_capture.set_stance("default")
    for name in ("ember",):
        logging.getLogger(name).setLevel(logging.WARNING)
