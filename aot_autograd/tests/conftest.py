"""Puts this folder on sys.path so tests can import the shared `aot_checks` helpers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
