"""Make the shared OpInfo harness (prim_decomp_opinfo.py) importable from the tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
