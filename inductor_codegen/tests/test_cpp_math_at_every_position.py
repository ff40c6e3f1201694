"""Math library functions in C++ kernels give one result per input, at every position.

gcc vectorizes a loop calling `tanhf` through glibc's vector routine and runs its last
iterations through the scalar `tanhf`, another algorithm: equal inputs came out 1 ulp
apart by position, which broke ties (the gradient through `tanh(x).sort()` of tied
values went to the other element than eager's). Every call now goes through one
routine (`codegen/cpp/vector_math.py`).
"""

from __future__ import annotations

import shutil

import pytest
import torch
from graph_helpers import compile_fn

from inductor_codegen.codegen.cpp.build import KernelLibrary, default_flags
from inductor_codegen.codegen.cpp.vector_math import (
    VECTOR_MATH,
    needed_functions,
    vector_math_source,
)
from inductor_codegen.codegen.cpp.vector_report import kernel_vector_notes

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# Each function of the table, elementwise, on inputs inside its domain (base values in (-2, 2)).
UNARY = {
    "acos": lambda b: torch.acos(b / 2),
    "acosh": lambda b: torch.acosh(b.abs() + 1),
    "asin": lambda b: torch.asin(b / 2),
    "asinh": torch.asinh,
    "atan": torch.atan,
    "atanh": lambda b: torch.atanh(b / 2),
    "cos": torch.cos,
    "cosh": torch.cosh,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": lambda b: torch.log(b.abs() + 0.1),
    "log10": lambda b: torch.log10(b.abs() + 0.1),
    "log1p": lambda b: torch.log1p(b.abs()),
    "log2": lambda b: torch.log2(b.abs() + 0.1),
    "sin": torch.sin,
    "sinh": torch.sinh,
    "tan": torch.tan,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}
BINARY = {
    "atan2": lambda b: torch.atan2(b, b * b - 1),
    "hypot": lambda b: torch.hypot(b, b * b - 1),
    "pow": lambda b: torch.pow(b.abs() + 0.5, b * b - 1),
}
REPEATS = 17  # 37 * 17 = 629 elements: vector loops of 16 and 8 lanes, then a scalar tail


@pytest.fixture(autouse=True)
def _kernels_compiled_into_each_cache(monkeypatch):
    monkeypatch.setattr(KernelLibrary, "_loaded", {})


def test_every_vector_math_function_is_in_the_tables():
    assert set(VECTOR_MATH[1]) <= set(UNARY)
    assert set(VECTOR_MATH[2]) == set(BINARY)


# float64 through the same definitions; erf and sigmoid through the prelude's helpers
FLOAT64_CHECKED = ("tanh", "exp", "erf", "sigmoid", "pow")


@pytest.mark.parametrize(
    "dtype, names",
    [
        pytest.param(torch.float32, tuple({**UNARY, **BINARY}), marks=pytest.mark.slow),
        (torch.float64, FLOAT64_CHECKED),
    ],
    ids=["float32", "float64"],
)
def test_equal_inputs_give_equal_results_at_every_position(dtype, names, tmp_path):
    torch.manual_seed(0)
    base = (torch.rand(37, dtype=torch.float64) * 4 - 2).to(dtype)
    x = base.repeat(REPEATS)
    for name in names:
        fn = {**UNARY, **BINARY}[name]
        # one function a kernel: a loop of many calls may stay scalar, hiding the tail
        compiled, _ = compile_fn(fn, x, options={"cache_dir": tmp_path})
        got = compiled(x)
        differing = (got.view(REPEATS, 37) != got[:37]).any(1).nonzero().flatten().tolist()
        assert not differing, f"{name} ({dtype}): rows {differing} differ from row 0"
        torch.testing.assert_close(got, fn(x), msg=lambda m, name=name: f"{name}: {m}")


def test_a_scalar_tail_gives_the_vector_loop_s_results(tmp_path):
    torch.manual_seed(1)
    long = torch.randn(64)
    short = long[:5].clone()  # only a tail: no vector iteration

    def f(x):
        return torch.tanh(x), torch.exp(x), torch.pow(x.abs(), x)

    compiled_long, _ = compile_fn(f, long, options={"cache_dir": tmp_path / "long"})
    compiled_short, _ = compile_fn(f, short, options={"cache_dir": tmp_path / "short"})
    for got_long, got_short in zip(compiled_long(long), compiled_short(short)):
        assert torch.equal(got_long[:5], got_short)


def test_loops_calling_math_functions_stay_vectorized(tmp_path):
    def f(x):
        return torch.tanh(x) * torch.exp(x) + torch.sigmoid(x).pow(x)

    x = torch.randn(1000)
    compiled, _ = compile_fn(f, x, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(x), f(x))
    reports = {}
    for source in sorted(tmp_path.rglob("*.cpp")):
        reports.update(kernel_vector_notes(source))
    assert reports and all(reports.values()), f"kernels left scalar: {reports}"


def test_only_the_functions_called_are_defined():
    text = "out[i] = ember_vm_tanhf(a[i]) + ember_sigmoid<float>(b[i]);"
    assert needed_functions(text) == {"tanh", "exp"}
    assert needed_functions("ember_vm_erf(x) + ember_vm_erfcf(y)") == {"erf", "erfc"}
    source = vector_math_source(needed_functions(text), libmvec=True)
    # the 512-bit variants are libmvec's routines (aliases), the narrower ones pad
    assert '.set _ZGVeN16v_ember_vm_tanhf, _ZGVeN16v_tanhf"' in source
    assert "_ZGVdN8v_ember_vm_expf(" in source and "_ZGVbN4v_ember_vm_expf(" in source
    assert "_ZGVeN16v_ember_vm_sinf" not in source
    assert "float ember_vm_sinf(float);" in source  # declared all the same


def test_kernels_built_for_256_bit_loops_give_equal_results_at_every_position(tmp_path):
    # the routine is then libmvec's 256-bit one, and no 512-bit variant is defined
    flags = [f for f in default_flags() if f != "-mprefer-vector-width=512"]
    torch.manual_seed(2)
    x = torch.randn(37).repeat(REPEATS)
    options = {"cache_dir": tmp_path, "cxx_flags": flags}
    compiled, _ = compile_fn(torch.tanh, x, options=options)
    got = compiled(x)
    assert torch.equal(got.view(REPEATS, 37), got[:37].expand(REPEATS, 37))
    torch.testing.assert_close(got, torch.tanh(x))
    source = "".join(path.read_text() for path in tmp_path.rglob("*.cpp"))
    assert "_ZGVeN16v_ember_vm_tanhf" not in source


@pytest.mark.parametrize("libmvec, widest", [(True, 64), (True, 32), (False, 64)])
def test_every_function_s_definitions_build_and_link(tmp_path, libmvec, widest):
    import subprocess

    from inductor_codegen.codegen.cpp.build import link_flags, vector_math_available

    if libmvec and not vector_math_available():
        pytest.skip("libmvec is not linkable here")
    names = frozenset(n for arity in VECTOR_MATH.values() for n in arity)
    source = tmp_path / "math.cpp"
    source.write_text(vector_math_source(names, libmvec, widest))
    flags = [f for f in default_flags() if f != "-mprefer-vector-width=512"]
    command = ["g++", *flags, str(source), "-o", str(tmp_path / "math.so")]
    command += ["-Wl,--no-undefined", *(link_flags() if libmvec else ()), "-lm"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
