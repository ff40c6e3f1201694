"""Compile generated Triton kernels for a CUDA target without a GPU.

The interpreter (TRITON_INTERPRET=1) runs kernels with numpy and checks values, not
types: a call Triton's compiler rejects (libdevice.pow of a float64 base and a float32
exponent) runs there. `compile_for_cuda` lowers every kernel of a graph's generated
source through Triton's compiler for an sm_90 target, in a child process with the
interpreter off; kernels whose pointers all hold one dtype (`pointer`, e.g. "*fp64").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

_KERNEL = re.compile(r"@triton\.jit(?:\([^)]*\))?\ndef (\w+)\(([^)]*)\):")

_CHILD = """
import importlib.util, json, sys, tempfile
from pathlib import Path
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from inductor_codegen.codegen.triton.runtime import MODULE_HEADER

source, signatures = json.load(sys.stdin)
path = Path(tempfile.mkdtemp()) / "generated_kernels.py"  # Triton reads a kernel's source
path.write_text(MODULE_HEADER + source)
spec = importlib.util.spec_from_file_location("generated_kernels", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
for name, (signature, constexprs) in signatures.items():
    triton.compile(
        ASTSource(getattr(module, name), signature, constexprs=constexprs),
        target=GPUTarget("cuda", 90, 32),
    )
"""


def _signature(params: str, pointer: str) -> tuple[dict, dict]:
    signature, constexprs = {}, {}
    for param in (p.strip() for p in params.split(",") if p.strip()):
        name = param.split(":")[0].strip()
        if "constexpr" in param:
            signature[name] = "constexpr"
            constexprs[name] = 64
        elif "ptr" in name:
            signature[name] = pointer
        else:
            signature[name] = "i64"
    return signature, constexprs


def compile_for_cuda(source: str, pointer: str) -> None:
    """Raise (with Triton's message) unless every kernel in `source` compiles for sm_90."""
    pytest.importorskip("triton.backends.nvidia")
    kernels = {name: _signature(params, pointer) for name, params in _KERNEL.findall(source)}
    assert kernels, "no @triton.jit kernel in the source"
    environment = {**os.environ, "TRITON_INTERPRET": "0"}
    environment["PYTHONPATH"] = os.pathsep.join([*sys.path, environment.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps([source, kernels]),
        capture_output=True,
        text=True,
        env=environment,
        cwd=Path(__file__).parent,
        timeout=600,
    )
    if result.returncode != 0:
        raise AssertionError(f"Triton rejects the generated kernels:\n{result.stderr[-3000:]}")
