"""The README's example runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path


def test_readme_example_runs():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, "README.md", "exec"), {})
    printed = output.getvalue().splitlines()
    assert printed[0] == "FakeTensor(size=(8, 4), dtype=torch.float32, device=cpu)"
    assert printed[1] == "True tensor 'x' size mismatch at index 0: expected 8, actual 16"
