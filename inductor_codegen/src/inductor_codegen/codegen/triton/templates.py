"""Triton matmul templates (mm, addmm, bmm) with fused pointwise epilogues.

Under max_autotune, `plan_matmul_templates` turns each mm/addmm/bmm ATen
call of a schedule into a `TemplateStep`: a tiled Triton kernel generated for
the sizes at hand (one BLOCK_M x BLOCK_N output tile per program, K in
BLOCK_K steps, a float32 accumulator, grouped program order for L2 reuse).
When the product's only reader is a pointwise kernel over the product's
elements (bias, activation, residual add, scaling, ...), that kernel's nodes
are computed on the accumulator before the store, and the product never
goes to memory. The step then sits where the epilogue kernel sat.

Each step keeps the ATen way too: `MatmulTemplateSource.epilogue` is the
epilogue as its own kernel, run after the ATen call (cuBLAS). The launcher
(`template_runtime.MatmulTemplateKernel`) times both on the first call and
keeps the faster.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.codegen.kernel import KernelArg, KernelPrinter
from inductor_codegen.codegen.triton.kernel import Scope, TritonKernelSource, generate_triton_kernel
from inductor_codegen.codegen.triton.kernel import triton_index as print_index
from inductor_codegen.codegen.triton.ops import (
    LOW_PRECISION,
    TRITON_DTYPES,
    as_tensor_text,
    cast_text,
    compute_dtype,
)
from inductor_codegen.errors import InductorError
from inductor_codegen.ir import ExternBuffer, Load, expr_loads
from inductor_codegen.lowering import BufferRef
from inductor_codegen.scheduler import (
    FusedKernel,
    LoopGroup,
    Schedule,
    node_body,
    outer_vars,
    writes_in_place,
)

__all__ = [
    "MATMUL_OPS",
    "MatmulTemplateSource",
    "TemplateStep",
    "generate_matmul_template",
    "plan_matmul_templates",
]

aten = torch.ops.aten
MATMUL_OPS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm"}
TEMPLATE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TemplateStep:
    """A matmul ATen call, and the pointwise kernel fused into its store (or None)."""

    name: str
    extern: ExternBuffer
    epilogue: FusedKernel | None

    @property
    def operands(self) -> tuple[BufferRef, ...]:
        """The tensors the product reads, in template order: a, b, then addmm's bias."""
        if MATMUL_OPS[self.extern.op] == "addmm":
            bias, a, b = self.extern.args[:3]
            return (a, b, bias)
        return tuple(self.extern.args[:2])


@dataclass(frozen=True, slots=True)
class MatmulTemplateSource:
    """A generated template kernel (function named KERNEL_NAME) and what launching it needs.

    `args`: the operands (a, b, bias; passed as views), then epilogue inputs,
    scalars and outputs. `epilogue` is the fused kernel on its own (reading
    the ATen product `product`), for the ATen way; None without an epilogue.
    """

    name: str
    source: str
    args: tuple[KernelArg, ...]
    op: str
    batch: int
    m: int
    n: int
    k: int
    dtype: torch.dtype
    product: str
    product_layout: object
    alpha: float
    beta: float
    epilogue: TritonKernelSource | None


def _op_kwargs(extern: ExternBuffer) -> tuple[float, float]:
    """(alpha, beta) of an addmm call (1, 1 otherwise)."""
    args = extern.args
    beta = extern.kwargs.get("beta", args[3] if len(args) > 3 else 1)
    alpha = extern.kwargs.get("alpha", args[4] if len(args) > 4 else 1)
    return float(alpha), float(beta)


# ---------------------------------------------------------------- planning


def _readers(steps, buffers) -> dict[str, set[int]]:
    """Buffer name -> positions of the steps that read it."""
    readers: dict[str, set[int]] = {}
    for position, step in enumerate(steps):
        if isinstance(step, ExternBuffer):
            names = set(step.reads)
        else:
            names = set()
            for node in step.nodes:
                body = node_body(buffers[node], step.outer, "r")
                names |= {ld.buffer for ld in expr_loads(body[0])} if body else set()
        for name in names:
            readers.setdefault(name, set()).add(position)
    return readers


def _layout_of(ref, buffers):
    return ref.layout if ref.layout is not None else buffers[ref.name].layout


def _template_fits(extern: ExternBuffer, buffers) -> bool:
    if extern.op not in MATMUL_OPS or extern.tuple_result or extern.layout is None:
        return False
    dtype = extern.layout.dtype
    if dtype not in TEMPLATE_DTYPES:
        return False
    step = TemplateStep("", extern, None)
    for ref in step.operands:
        if not isinstance(ref, BufferRef) or ref.name not in buffers:
            return False
        layout = _layout_of(ref, buffers)
        if layout is None or layout.dtype != dtype:
            return False
        if not all(s.is_Integer for s in (*layout.size, *layout.stride)):
            return False
    return all(s.is_Integer for s in extern.layout.size)


def plan_matmul_templates(plan: Schedule, graph) -> tuple[Schedule, dict]:
    """(the schedule with matmul templates, {step name: MatmulTemplateSource}).

    A matmul whose template cannot be generated stays an ATen call; an
    epilogue that cannot be fused stays its own kernel.
    """
    buffers = graph.buffer_by_name
    steps = list(plan.steps)
    readers = _readers(steps, buffers)
    outputs = {v.view.buffer for v in graph.outputs if getattr(v, "view", None) is not None}
    sources: dict = {}
    moved: dict[int, TemplateStep] = {}  # epilogue position -> the step that replaces it
    for position, step in enumerate(steps):
        if not isinstance(step, ExternBuffer) or not _template_fits(step, buffers):
            continue
        name = f"triton_template_{MATMUL_OPS[step.op]}_{len(sources)}"
        where = readers.get(step.name, set())
        epilogue_at = next(iter(where)) if len(where) == 1 else None
        if (
            step.name not in outputs
            and epilogue_at is not None
            and epilogue_at > position
            and isinstance(steps[epilogue_at], FusedKernel)
            and epilogue_at not in moved
            # (moved past a write in place, the product would read the written values)
            and not any(writes_in_place(steps[k], buffers) for k in range(position, epilogue_at))
        ):
            template = TemplateStep(name, step, steps[epilogue_at])
            source = _try_generate(template, buffers)
            if source is not None:
                sources[name], moved[epilogue_at] = source, template
                steps[position] = None
                continue
        template = TemplateStep(name, step, None)
        source = _try_generate(template, buffers)
        if source is not None:
            sources[name], steps[position] = source, template
    for position, template in moved.items():
        steps[position] = template
    return Schedule(tuple(s for s in steps if s is not None), plan.buffers), sources


def _try_generate(step: TemplateStep, buffers) -> MatmulTemplateSource | None:
    try:
        return generate_matmul_template(step, buffers)
    except InductorError:
        return None


# ---------------------------------------------------------------- code generation


class TemplateCodegen(KernelPrinter):
    """Prints one TemplateStep: the tiled product, then the epilogue on the accumulator."""

    def __init__(self, step: TemplateStep, buffers: dict):
        super().__init__(step, buffers, produced=set())
        self.step = step
        self.extern = step.extern
        self.op = MATMUL_OPS[step.extern.op]
        self.layout = step.extern.layout
        self.dtype = self.layout.dtype
        self.locals_: dict[tuple, str] = {}
        self.math_calls = 0  # counted by Scope; the template's launch does not use it
        self.lines: list[str] = []
        sizes = [int(s) for s in self.layout.size]
        self.batch, self.m, self.n = ([1] + sizes)[-3:] if self.op != "bmm" else sizes
        a_layout = _layout_of(step.operands[0], buffers)
        self.k = int(a_layout.size[-1])
        # Output dims of more than one element get loop variables x0, x1, ... (as node_body).
        full = (self.batch, self.m, self.n)
        texts = ("pid_b", "rm[:, None]", "rn[None, :]")
        self.dims = [(size, text) for size, text in zip(full, texts) if size != 1]
        self.outer = tuple(sympy.Integer(size) for size, _ in self.dims)

    # ------------------------------------------------ what Scope calls

    def pointer_type(self, kind: str, dtype, aliased: bool = False) -> str:
        return TRITON_DTYPES[dtype]

    def scalar_type(self, dtype) -> str:
        return TRITON_DTYPES[dtype]

    def index(self, expr, scope: Scope) -> str:
        text = print_index(expr)
        if not any(s.name.startswith("x") for s in expr.free_symbols):
            text = f"({text} + xzero)"
        return text

    def load(self, expr: Load, scope: Scope, extra_mask: str | None) -> str:
        if expr.buffer == self.extern.name:
            return "product"
        var = self.locals_.get((expr.buffer, sympy.expand(expr.index)))
        if var is not None:
            return var
        if expr.buffer in self.step.epilogue.nodes:
            raise InductorError(f"the epilogue reads {expr.buffer} where it was not computed")
        ptr = self.pointer(expr.buffer, writing=False)
        mask = "xmask" if extra_mask is None else f"xmask & ({extra_mask})"
        text = f"tl.load({ptr} + {self.index(expr.index, scope)}, {mask}, other=0)"
        return f"{text}.to(tl.float32)" if expr.dtype in LOW_PRECISION else text

    # ------------------------------------------------ the kernel

    def generate(self) -> MatmulTemplateSource:
        operand_params = self._operands()
        self._main_loop()
        self._epilogue_prologue()
        if self.step.epilogue is None:
            self._store(self.extern.name, self.layout.index(self._full_index()), "product")
        else:
            self._epilogue()
        params = operand_params + [self._param(a) for a in self.args.values()]
        params += [
            f"{p}: tl.constexpr" for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K")
        ]
        body = "\n".join("    " + line for line in self.lines)
        source = f"@triton.jit\ndef KERNEL_NAME({', '.join(params)}):\n{body}\n"
        epilogue = None
        if self.step.epilogue is not None:
            epilogue = generate_triton_kernel(self.step.epilogue, self.buffers)
        operand_args = tuple(
            KernelArg("in", ref.name, TRITON_DTYPES[self.dtype]) for ref in self.step.operands
        )
        alpha, beta = _op_kwargs(self.extern) if self.op == "addmm" else (1.0, 1.0)
        return MatmulTemplateSource(
            self.step.name,
            source,
            operand_args + tuple(self.args.values()),
            self.op,
            self.batch,
            self.m,
            self.n,
            self.k,
            self.dtype,
            self.extern.name,
            self.layout,
            alpha,
            beta,
            epilogue,
        )

    def _param(self, arg: KernelArg) -> str:
        return self.scalars[arg.name] if arg.kind == "scalar" else self.pointer_names[arg.name]

    def _operands(self) -> list[str]:
        """Sizes and strides as constants; operands arrive as views (their offset applied)."""
        layouts = [_layout_of(ref, self.buffers) for ref in self.step.operands]
        storage = [int(lay.storage_numel()) for lay in layouts]
        storage += [int(self.buffers[a].layout.storage_numel()) for a in self._epilogue_buffers()]
        wide = max(storage + [self.batch * self.m * self.n]) >= INT32_LIMIT
        self.int64 = wide
        a, b = layouts[0], layouts[1]
        strides = {
            "stride_am": a.stride[-2],
            "stride_ak": a.stride[-1],
            "stride_bk": b.stride[-2],
            "stride_bn": b.stride[-1],
            "stride_ab": a.stride[0] if self.op == "bmm" else 0,
            "stride_bb": b.stride[0] if self.op == "bmm" else 0,
        }
        lines = self.lines
        lines.append(f"M = {self.m}")
        lines.append(f"N = {self.n}")
        lines.append(f"K = {self.k}")
        for name, value in strides.items():
            lines.append(f"{name} = {int(value)}")
        return ["a_ptr", "b_ptr"] + (["bias_ptr"] if self.op == "addmm" else [])

    def _epilogue_buffers(self) -> list[str]:
        epilogue = self.step.epilogue
        if epilogue is None:
            return [self.extern.name]
        names = list(epilogue.nodes)
        for node in epilogue.nodes:
            body = node_body(self.buffers[node], epilogue.outer, "y")
            names += [ld.buffer for ld in expr_loads(body[0])] if body else []
        return [n for n in dict.fromkeys(names) if n in self.buffers and n != self.extern.name]

    def _main_loop(self) -> None:
        lines = self.lines
        wide = ".to(tl.int64)" if self.int64 else ""
        lines += [
            "pid = tl.program_id(0)",
            f"pid_b = tl.program_id(1){wide}",
            "grid_m = (M + BLOCK_M - 1) // BLOCK_M",
            "grid_n = (N + BLOCK_N - 1) // BLOCK_N",
            "width = GROUP_M * grid_n",
            "group_id = pid // width",
            "first_m = group_id * GROUP_M",
            "group_m = min(grid_m - first_m, GROUP_M)",
            "pid_m = first_m + ((pid % width) % group_m)",
            "pid_n = (pid % width) // group_m",
            f"rm = pid_m{wide} * BLOCK_M + tl.arange(0, BLOCK_M)",
            f"rn = pid_n{wide} * BLOCK_N + tl.arange(0, BLOCK_N)",
            # Rows and columns past the edge read the first ones again (never out of bounds).
            "ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)",
            "rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)",
            "rk = tl.arange(0, BLOCK_K)",
            "a_ptrs = a_ptr + pid_b * stride_ab + ram[:, None] * stride_am + rk[None, :] * stride_ak",
            "b_ptrs = b_ptr + pid_b * stride_bb + rk[:, None] * stride_bk + rbn[None, :] * stride_bn",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "for k in range(0, tl.cdiv(K, BLOCK_K)):",
            "    if EVEN_K:",
            "        a = tl.load(a_ptrs)",
            "        b = tl.load(b_ptrs)",
            "    else:",
            "        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)",
            "        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)",
            f"    acc = {'ember_dot_ieee' if self.dtype == torch.float32 else 'ember_dot'}(a, b, acc)",
            "    a_ptrs += BLOCK_K * stride_ak",
            "    b_ptrs += BLOCK_K * stride_bk",
        ]
        if self.op == "addmm":
            self._bias()

    def _bias(self) -> None:
        """acc = alpha * acc + beta * bias, with the bias broadcast like ATen's."""
        layout = _layout_of(self.step.operands[2], self.buffers)
        parts = []
        for size, stride, var in zip(
            reversed(layout.size), reversed(layout.stride), ("rn[None, :]", "rm[:, None]")
        ):
            if int(size) != 1 and int(stride) != 0:
                parts.append(f"{var} * {int(stride)}")
        index = " + ".join(parts) if parts else "0"
        alpha, beta = _op_kwargs(self.extern)
        self.lines.append("bmask = (rm[:, None] < M) & (rn[None, :] < N)")
        self.lines.append(
            f"bias = tl.load(bias_ptr + ({index}) + rm[:, None] * 0 + rn[None, :] * 0, bmask, other=0)"
        )
        scaled = "acc" if alpha == 1 else f"acc * {alpha!r}"
        bias = "bias.to(tl.float32)" if beta == 1 else f"bias.to(tl.float32) * {beta!r}"
        self.lines.append(f"acc = {scaled} + {bias}")

    def _epilogue_prologue(self) -> None:
        lines = self.lines
        for k, (_, text) in enumerate(self.dims):
            lines.append(f"x{k} = {text}")
        lines.append("xmask = (rm[:, None] < M) & (rn[None, :] < N)")
        lines.append("xzero = rm[:, None] * 0 + rn[None, :] * 0")
        if self.dtype in LOW_PRECISION:
            # The product as ATen stores it: rounded to the output dtype once.
            lines.append(f"product = acc.to({TRITON_DTYPES[self.dtype]}).to(tl.float32)")
        else:
            lines.append("product = acc")

    def _full_index(self) -> tuple:
        """The product's (batch, row, column) index in the loop variables."""
        xs = iter(outer_vars(len(self.dims)))
        full = [
            sympy.Integer(0) if size == 1 else next(xs) for size in (self.batch, self.m, self.n)
        ]
        return tuple(full) if self.op == "bmm" else tuple(full[1:])

    def _store(self, name: str, index, value: str, value_dtype=torch.float32) -> None:
        dtype = self.buffers[name].layout.dtype
        if compute_dtype(value_dtype) != compute_dtype(dtype) or dtype == torch.bool:
            value = cast_text(value, value_dtype, dtype)
        stored = f"{as_tensor_text(value, dtype)}.to({TRITON_DTYPES[dtype]})"
        ptr = self.pointer(name, writing=True)
        self.lines.append(f"tl.store({ptr} + {self.index(index, None)}, {stored}, xmask)")

    def _epilogue(self) -> None:
        epilogue = self.step.epilogue
        if any(isinstance(item, LoopGroup) for item in epilogue.items):
            raise InductorError("an epilogue with inner loops is not fused")
        expected = sympy.expand(self.layout.index(self._full_index()))
        scope = Scope(self, None, 0, "xmask")
        scope.lines = self.lines
        for name in epilogue.nodes:
            body = node_body(self.buffers[name], self.outer, "y")
            if body is None or body[2]:
                raise InductorError(f"{name} does not run over the product's elements")
            value, store, _ = body
            for load in expr_loads(value):
                if load.buffer == self.extern.name and sympy.expand(load.index) != expected:
                    raise InductorError(f"{name} reads the product at another index")
            text = scope.value(value)
            dtype = self.buffers[name].layout.dtype
            if compute_dtype(value.dtype) != compute_dtype(dtype) or dtype == torch.bool:
                text = cast_text(text, value.dtype, dtype)
            self.locals_[(name, sympy.expand(store))] = text
            if name not in epilogue.locals_:
                self._store(name, store, text, dtype)


def generate_matmul_template(step: TemplateStep, buffers: dict) -> MatmulTemplateSource:
    """The Triton source of a matmul template step (raises InductorError when it cannot fuse)."""
    return TemplateCodegen(step, buffers).generate()
