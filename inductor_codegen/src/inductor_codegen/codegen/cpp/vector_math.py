"""Math library calls of the C++ kernels: one routine per function, at every position.

gcc vectorizes a loop calling `tanhf` through glibc's vector math library (libmvec,
`_ZGVeN16v_tanhf`) and runs the loop's last iterations (and any loop it leaves
scalar) through the scalar `tanhf`. The two are different algorithms: equal inputs
then give results 1 ulp apart by their position, so ties are broken (a sort, an
argmax or an `==` of a computed tensor disagrees with eager, whose vectorized math
(tanh, exp, log, ...) computes its tail through the same vector routine; a few eager
kernels, sigmoid and sinh among them, do not, and eager is then itself inconsistent).

So kernels call `ember_vm_tanhf` (float) or `ember_vm_tanh` (double), declared
`simd`, and each file defines, for the functions it calls:

- the vector variants gcc calls (`_ZGV{b,c,d,e}N{lanes}v_ember_vm_tanhf`, every
  instruction set up to the widest the build targets and prefers), each computing
  through libmvec's variant of that width: the widest is that routine itself (an
  assembler alias), a narrower vector is padded with zeros;
- the scalar function, the same routine on one lane.

Every value of `tanh` in a kernel is then that one libmvec routine's (lanes are
computed independently), in the vector body, the tail and a scalar loop alike. Where
libmvec is not linkable, or not on x86-64, the functions are the scalar libm ones
and loops calling them stay scalar: consistent, and slower.
"""

from __future__ import annotations

import re

import torch

from inductor_codegen.codegen.cpp.ops import compute_type

__all__ = ["VECTOR_MATH", "needed_functions", "vector_math_call", "vector_math_source"]

# glibc's libmvec has x86-64 vector variants (SSE4, AVX, AVX2, AVX-512) of these,
# keyed by arity.
VECTOR_MATH = {
    1: (
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "cos",
        "cosh",
        "erf",
        "erfc",
        "exp",
        "exp2",
        "expm1",
        "log",
        "log10",
        "log1p",
        "log2",
        "sin",
        "sinh",
        "tan",
        "tanh",
    ),
    2: ("atan2", "hypot", "pow"),
}
_ARITY = {name: arity for arity, names in VECTOR_MATH.items() for name in names}

# Prelude helpers that call these functions (templates instantiated in kernels).
_HELPER_CALLS = {"ember_sigmoid": ("exp",), "ember_erf": ("erf",)}

# The x86-64 vector ABI's instruction sets, narrowest first: (letter, vector bytes,
# the macro the build defines when it targets that set).
_ISAS = (("b", 16, None), ("c", 32, "__AVX__"), ("d", 32, "__AVX2__"), ("e", 64, "__AVX512F__"))
_CTYPES = (("f", "float", 4), ("", "double", 8))
# Each kernel library defines its own copies: direct calls, never another library's.
_HIDDEN = 'visibility("hidden")'
_HIDDEN_ATTR = f"__attribute__(({_HIDDEN}))"


def vector_math_call(name: str):
    """The C++ spelling of op `name`: `ember_vm_<name>f` where every argument is float
    (as `std::<name>` picks its float overload), else `ember_vm_<name>` (double)."""

    def emit(args, dtypes, out):
        floats = all(compute_type(d) == "float" for d in dtypes if d != torch.bool)
        suffix = "f" if floats and all(d != torch.bool for d in dtypes) else ""
        return f"ember_vm_{name}{suffix}({', '.join(args)})"

    return emit


def needed_functions(text: str) -> frozenset[str]:
    """The vector math functions `text` (kernel source) calls, directly or through a
    prelude helper."""
    used = set()
    for token in re.findall(r"\bember_vm_([a-z0-9]+)\(", text):
        if token in _ARITY:  # double (`erf` ends in f: the whole name first)
            used.add(token)
        elif token.endswith("f") and token[:-1] in _ARITY:
            used.add(token[:-1])
    for helper, names in _HELPER_CALLS.items():
        if re.search(rf"\b{helper}\b", text):
            used.update(names)
    return frozenset(used)


def vector_math_source(used: frozenset[str], libmvec: bool, widest_bytes: int = 64) -> str:
    """Declarations of every `ember_vm_*` function and definitions of those in `used`:
    through libmvec where `libmvec` (on x86-64), else libm's scalar functions.

    The routine computing every value is libmvec's widest variant the build targets and
    the loops may use (`widest_bytes`: 64 where kernels are built for 512-bit loops, else
    32); the variants up to it are defined. gcc calls none wider (its loops are no wider
    than the preferred width); a call to one would fail to load, never run another routine.
    """
    scalar = _scalar_source(used)
    if not libmvec:
        return "#include <cmath>\n" + scalar + "\n"
    lines = ["#include <cmath>", "#if defined(__x86_64__)", _VECTOR_TYPES]
    lines += [_declaration(name, suffix, ctype) for name in _ARITY for suffix, ctype, _ in _CTYPES]
    references = [isa for isa in reversed(_ISAS) if isa[1] <= widest_bytes]
    for i, (letter, width, macro) in enumerate(references):
        keyword = "#if" if i == 0 else "#elif"
        lines.append(f"{keyword} defined({macro})" if macro else "#else")
        lines += _definitions(used, _ISAS[: _ISAS.index((letter, width, macro)) + 1], letter, width)
    lines += ["#endif", "#else", scalar, "#endif"]
    return "\n".join(lines) + "\n"


_VECTOR_TYPES = "\n".join(
    f"typedef {ctype} ember_vm_{ctype}{width // size} __attribute__((vector_size({width})));"
    for ctype, size in (("float", 4), ("double", 8))
    for width in (16, 32, 64)
)


def _declaration(name: str, suffix: str, ctype: str) -> str:
    params = ", ".join([ctype] * _ARITY[name])
    return (
        f'extern "C" __attribute__((simd("notinbranch"), const, nothrow, {_HIDDEN})) '
        f"{ctype} ember_vm_{name}{suffix}({params});"
    )


def _definitions(used, isas, ref_letter: str, ref_width: int) -> list[str]:
    """Each used function's scalar and vector variants (every set in `isas`), through
    libmvec's variant for `ref_letter` (`ref_width` bytes)."""
    lines = []
    for name in sorted(used):
        arity = _ARITY[name]
        vs = "v" * arity
        for suffix, ctype, size in _CTYPES:
            ref_lanes = ref_width // size
            ref_type = f"ember_vm_{ctype}{ref_lanes}"
            ref = f"_ZGV{ref_letter}N{ref_lanes}{vs}_{name}{suffix}"
            params = ", ".join(f"{ref_type}" for _ in range(arity))
            lines.append(f'extern "C" {ref_type} {ref}({params});')
            for letter, width, _ in isas:
                lanes = width // size
                vtype = f"ember_vm_{ctype}{lanes}"
                args = [f"a{k}" for k in range(arity)]
                head = ", ".join(f"{vtype} {a}" for a in args)
                symbol = f"_ZGV{letter}N{lanes}{vs}_ember_vm_{name}{suffix}"
                if lanes == ref_lanes:
                    # NOTE: an assembler alias: the loop calls libmvec's routine itself
                    # (a wrapper's extra call costs a quarter of a tanh loop's time)
                    lines.append(f'asm(".set {symbol}, {ref}");')
                    continue
                pads = " ".join(
                    f"{ref_type} w{a} = {{}}; __builtin_memcpy(&w{a}, &{a}, {width});" for a in args
                )
                call = f"{ref}({', '.join('w' + a for a in args)})"
                body = (
                    f"{pads} const {ref_type} r = {call}; {vtype} out; "
                    f"__builtin_memcpy(&out, &r, {width}); return out;"
                )
                lines.append(f'extern "C" {_HIDDEN_ATTR} {vtype} {symbol}({head}) {{ {body} }}')
            args = [f"x{k}" for k in range(arity)]
            head = ", ".join(f"{ctype} {a}" for a in args)
            pads = " ".join(f"{ref_type} w{a} = {{}}; w{a}[0] = {a};" for a in args)
            call = f"{ref}({', '.join('w' + a for a in args)})"
            # NOTE: defined under another name with the same symbol (an asm label): a
            # definition of the `simd` declaration would make gcc clone it itself.
            scalar = f"ember_vm_scalar_{name}{suffix}"
            lines.append(
                f'extern "C" {_HIDDEN_ATTR} {ctype} {scalar}({head}) __asm__("ember_vm_{name}{suffix}");'
            )
            lines.append(f"{ctype} {scalar}({head}) {{ {pads} return {call}[0]; }}")
    return lines


def _scalar_source(used) -> str:
    """Every function as libm's scalar one (no vector variants: loops stay scalar)."""
    lines = []
    for name, arity in _ARITY.items():
        for suffix, ctype, _ in _CTYPES:
            args = [f"x{k}" for k in range(arity)]
            head = ", ".join(f"{ctype} {a}" for a in args)
            lines.append(
                f"static inline {ctype} ember_vm_{name}{suffix}({head}) "
                f"{{ return std::{name}({', '.join(args)}); }}"
            )
    return "\n".join(lines)
