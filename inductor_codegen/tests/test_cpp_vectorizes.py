"""The generated C++ loops are vectorized by the installed compiler.

Whether gcc vectorizes a loop of selects depends on its version and on how the
loop is spelled: with floating-point traps off, gcc 13 left a chain of
NaN-propagating maximums after ReLUs (a max pool over a batch norm) scalar and
branchy, about 10x slower; with traps on, gcc 12 and 13 could not if-convert a
loop storing a ReLU mask while comparisons trapped on NaN. Each program here is
compiled by the code generator, and the compiler's own report must say that
every kernel has a vectorized loop.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import compile_fn

from inductor_codegen.codegen.cpp.build import CompilerConfig

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _kernel_reports(cache_dir) -> dict[str, list[str]]:
    """For each generated kernel, the compiler's vectorization notes inside it."""
    reports = {}
    flags = [f for f in CompilerConfig().flags if f not in ("-shared", "-w")]
    for source in sorted(cache_dir.rglob("*.cpp")):
        text = source.read_text()
        report = subprocess.run(
            ["g++", *flags, "-c", str(source), "-o", str(source.with_suffix(".o")),
             "-fopt-info-vec-optimized"],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        lines = text.splitlines()
        starts = [
            i + 1 for i, line in enumerate(lines) if line.startswith('extern "C" void kernel_')
        ]
        for start, end in zip(starts, [*starts[1:], len(lines) + 1]):
            name = re.search(r"kernel_\w+", lines[start - 1]).group(0)
            reports[name] = [
                note for note in report.splitlines()
                if "loop vectorized" in note and start <= int(note.split(":")[1]) < end
            ]  # fmt: skip
    return reports


def _assert_every_kernel_vectorized(cache_dir):
    reports = _kernel_reports(cache_dir)
    assert reports, "no C++ kernel was generated"
    scalar = [name for name, notes in reports.items() if not notes]
    assert not scalar, f"kernels left scalar by the installed g++: {scalar}"


def test_batch_norm_relu_max_pool_between_convolutions_is_vectorized(tmp_path):
    # a conv net's block: the convolutions run channels-last, and the kernel between
    # them (batch norm, ReLU, a 2x2 max pool) reads and writes that layout
    torch.manual_seed(0)
    x = torch.randn(8, 3, 32, 32)
    first, second = torch.randn(32, 3, 3, 3), torch.randn(16, 32, 3, 3)
    mean, var = torch.randn(32), torch.rand(32) + 0.5
    weight, bias = torch.randn(32), torch.randn(32)

    def f(x, first, mean, var, weight, bias, second):
        y = F.batch_norm(F.conv2d(x, first, padding=1), mean, var, weight, bias, training=False)
        return F.conv2d(F.max_pool2d(F.relu(y), 2), second, padding=1)

    args = (x, first, mean, var, weight, bias, second)
    compiled, _ = compile_fn(f, *args, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(*args), f(*args), rtol=1e-4, atol=1e-4)
    _assert_every_kernel_vectorized(tmp_path)


def test_relu_with_a_stored_mask_is_vectorized(tmp_path):
    x = torch.randn(4096)
    x[::7] = float("nan")

    def f(x):
        y = torch.relu(x * 2)
        return y, y <= 0, y > 1

    compiled, _ = compile_fn(f, x, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(x), f(x), equal_nan=True)
    _assert_every_kernel_vectorized(tmp_path)


def test_float_comparisons_with_nan_and_mixed_types_match_eager(tmp_path):
    x = torch.tensor([float("nan"), -1.0, 0.0, -0.0, 1.0, float("inf"), -float("inf")] * 9)
    i = torch.arange(63) - 30

    def f(x, i):
        return (x < 0, x <= 0, x > 0, x >= 0, x < i, i >= x, i < 3, torch.where(x > 0, x, i))

    compiled, _ = compile_fn(f, x, i, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(x, i), f(x, i), equal_nan=True)
