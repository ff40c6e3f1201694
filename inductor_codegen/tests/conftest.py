"""Shared test setup: graphs come from make_fx with prim_decomp's inductor_default table.

make_fx is the reference front end here (tests only); the package itself
never imports it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# The models shared with the benchmarks (benchmarks/models.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
os.environ.setdefault("EMBER_CACHE_DIR", str(Path.home() / ".cache" / "ember"))

import pytest  # noqa: E402
import torch  # noqa: E402

# Triton reads TRITON_INTERPRET when it is first imported, and other test files
# import it indirectly (make_fx loads torch's compiler stack): set it before any of them.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random inputs on every run."""
    torch.manual_seed(0)
