"""C++ kernels are vectorized as wide as ATen's own CPU kernels.

gcc's tuning for Intel's AVX-512 server CPUs prefers 256-bit vectors even under
`-march=native`; where ATen runs its AVX-512 kernels the default flags ask for 512-bit
loops, so a GELU or a layer norm row is not half as wide as the kernels beside it.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import check

from inductor_codegen.codegen.cpp.build import CompilerConfig, default_flags, vector_width_flags

WIDE = "-mprefer-vector-width=512"


@pytest.mark.parametrize(
    ("machine", "capability", "expected"),
    [
        ("x86_64", "AVX512", (WIDE,)),
        ("AMD64", "AVX512", (WIDE,)),
        ("x86_64", "AVX2", ()),
        ("x86_64", "DEFAULT", ()),
        ("aarch64", "AVX512", ()),
        ("aarch64", "SVE256", ()),
    ],
)
def test_vector_width_follows_aten_cpu_capability(machine, capability, expected):
    assert vector_width_flags(machine, capability) == expected


def test_default_flags_ask_for_the_width_aten_uses():
    wide = vector_width_flags() == (WIDE,)
    assert (WIDE in CompilerConfig().flags) == wide
    assert CompilerConfig().flags == default_flags()
    # Flags given by the caller are used as given.
    assert CompilerConfig("g++", ("-O1",)).flags == ("-O1",)


def _gelu_then_layer_norm(x, weight, bias):
    return F.layer_norm(F.gelu(x), x.shape[-1:], weight, bias)


def _disassembly(folder) -> str:
    libraries = list(folder.rglob("*.so"))
    assert libraries
    return "".join(
        subprocess.run(["objdump", "-d", str(lib)], capture_output=True, text=True).stdout
        for lib in libraries
    )


@pytest.mark.parametrize("wide", [True, False], ids=["wide", "tuned"])
def test_gelu_and_layer_norm_rows_match_eager_under_server_tuning(tmp_path, wide):
    """Built as for an Intel AVX-512 server (its tuning prefers 256-bit vectors): with
    the wide flag the loops use 512-bit registers; the results equal eager either way."""
    if vector_width_flags() != (WIDE,) or shutil.which("objdump") is None:
        pytest.skip("ATen does not run AVX-512 kernels here, or no objdump")
    x = torch.randn(128, 128)
    weight, bias = torch.randn(128), torch.randn(128)
    flags = [f for f in default_flags() if f != WIDE] + ["-mtune=icelake-server"]
    flags += [WIDE] if wide else []
    options = {"cache_dir": str(tmp_path), "cxx_flags": flags}
    check(_gelu_then_layer_norm, x, weight, bias, options=options)
    assert ("zmm" in _disassembly(tmp_path)) == wide


def test_gelu_and_layer_norm_rows_match_eager_at_default_flags(tmp_path):
    x = torch.randn(64, 128)
    weight, bias = torch.randn(128), torch.randn(128)
    check(_gelu_then_layer_norm, x, weight, bias, options={"cache_dir": str(tmp_path)})
