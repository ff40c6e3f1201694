"""The accuracy rule every benchmark row is held to.

A compiled row is compared with a reference run of eager in higher precision,
and with eager at the row's own precision against that same reference:

    error(compiled, reference) <= SLACK * error(eager, reference) + FLOOR

with SLACK = 3 and FLOOR = 2e-3. The reference:

- bf16 rows (benchmarks/gpu_bench.py: bf16 inference, AMP bf16 training):
  eager in float32 (weights and inputs float32, autocast off);
- float32 rows (benchmarks/model_bench.py on the CPU): eager in float64
  (a float64 copy of the model and its float inputs), so eager-fp32's own error
  is measured, not zero.

Errors are relative. Inference: max |out - ref| / max |ref| over the output
tensors. Training: the loss, |loss - ref| / |ref|, and the global norm of all
parameter gradients, |norm - ref| / ref; a training row fails when either fails.
A NaN error fails. A failing row is printed as FAIL in the table and stored as
`"<backend>_accuracy": "FAIL"` in the JSON (else "ok"), beside each error as
`"<backend>_err_<metric>"` (eager's own as `"eager_err_<metric>"`).

    >>> verdict({"loss": 1e-3, "grad_norm": 5e-3}, {"loss": 1e-3, "grad_norm": 1e-3})
    'ok'
"""

from __future__ import annotations

import math

import torch

SLACK = 3.0
FLOOR = 2e-3


def tensors_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """max |got - want| / max |want| over paired tensors (computed in float64)."""
    got = [t.detach().double() for t in got]
    want = [t.detach().double() for t in want]
    scale = max((float(w.abs().max()) for w in want if w.numel()), default=0.0) or 1.0
    worst = max((float((g - w).abs().max()) for g, w in zip(got, want) if w.numel()), default=0.0)
    return worst / scale


def scalar_error(got: float, want: float) -> float:
    """|got - want| / |want| (absolute when `want` is 0)."""
    return abs(got - want) / (abs(want) or 1.0)


def global_grad_norm(grads: list[torch.Tensor]) -> float:
    """The L2 norm of all gradients together, accumulated in float64."""
    return math.sqrt(sum(float(g.detach().double().pow(2).sum()) for g in grads if g is not None))


def training_errors(loss: float, grad_norm: float, reference: tuple[float, float]) -> dict:
    """The errors of a training step's loss and gradient norm against the reference's."""
    return {
        "loss": scalar_error(loss, reference[0]),
        "grad_norm": scalar_error(grad_norm, reference[1]),
    }


def within_rule(error: float, eager_error: float) -> bool:
    """Whether one metric passes: error <= SLACK * eager_error + FLOOR (NaN fails)."""
    if math.isnan(error):
        return False
    bound = SLACK * (0.0 if math.isnan(eager_error) else eager_error) + FLOOR
    return error <= bound


def verdict(errors: dict[str, float], eager_errors: dict[str, float]) -> str:
    """ "ok" when every metric passes the rule against eager's error on it, else "FAIL"."""
    ok = all(within_rule(errors[name], eager_errors[name]) for name in errors)
    return "ok" if ok else "FAIL"


def record(row: dict, label: str, errors: dict[str, float], eager_errors: dict[str, float]) -> None:
    """Store a backend's errors and verdict in a benchmark row (its JSON keys)."""
    for name, value in errors.items():
        row[f"{label}_err_{name}"] = value
    row[f"{label}_accuracy"] = verdict(errors, eager_errors)


def cell(row: dict, label: str) -> str:
    """The table cell of a backend's accuracy: "ok 1.2e-03" or "FAIL 4.0e-01" (the
    largest error); eager's own: the error alone."""
    errors = [v for k, v in row.items() if k.startswith(f"{label}_err_")]
    if not errors:
        return "-"
    worst = f"{max(errors):.1e}"
    return worst if label == "eager" else f"{row[f'{label}_accuracy']} {worst}"
