"""Puts this folder on sys.path for the shared `aot_checks` helpers; turns invariant checks on."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _aot_invariant_checks():
    from aot_autograd import checks_enabled

    with checks_enabled():
        yield
