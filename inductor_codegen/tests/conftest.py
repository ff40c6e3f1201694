"""Shared fixtures: graphs come from make_fx with torch's core ATen decompositions.

make_fx and torch._decomp are the reference front end here (tests only); the
package itself never imports them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("EMBER_CACHE_DIR", str(Path.home() / ".cache" / "ember"))
