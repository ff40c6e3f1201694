"""Shared test setup: graphs come from make_fx with prim_decomp's inductor_default table.

make_fx is the reference front end here (tests only); the package itself
never imports it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("EMBER_CACHE_DIR", str(Path.home() / ".cache" / "ember"))

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random inputs on every run."""
    torch.manual_seed(0)
