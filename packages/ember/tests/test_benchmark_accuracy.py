"""The benchmarks' accuracy rule (benchmarks/accuracy.py) and its use in gpu_bench and model_bench.

A compiled row fails when its error against a higher-precision eager reference
exceeds 3x eager's own error at the row's precision + 2e-3.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

accuracy = importlib.import_module("accuracy")


def test_accuracy_rule_bound_is_three_times_eager_error_plus_floor():
    assert accuracy.within_rule(3 * 1e-2 + 2e-3, 1e-2)
    assert not accuracy.within_rule(3 * 1e-2 + 2.1e-3, 1e-2)
    assert accuracy.within_rule(2e-3, 0.0)
    assert not accuracy.within_rule(2.1e-3, 0.0)


def test_accuracy_rule_nan_error_fails():
    assert not accuracy.within_rule(math.nan, 1e-3)
    assert accuracy.verdict({"loss": math.nan}, {"loss": math.nan}) == "FAIL"


def test_accuracy_training_row_fails_when_loss_or_grad_norm_fails():
    eager = accuracy.training_errors(1.001, 10.0, reference=(1.0, 10.0))
    good = accuracy.training_errors(1.002, 10.01, reference=(1.0, 10.0))
    bad_norm = accuracy.training_errors(1.001, 10.5, reference=(1.0, 10.0))
    assert accuracy.verdict(good, eager) == "ok"
    assert accuracy.verdict(bad_norm, eager) == "FAIL"


def test_accuracy_tensors_error_is_relative_to_the_reference_scale():
    want = [torch.tensor([10.0, -20.0])]
    assert accuracy.tensors_error([torch.tensor([10.0, -19.0])], want) == pytest.approx(0.05)
    assert accuracy.global_grad_norm([torch.ones(4), torch.ones(5)]) == pytest.approx(3.0)


def test_accuracy_record_and_cell_print_fail():
    row = {}
    accuracy.record(row, "ember", {"outputs": 0.5}, {"outputs": 1e-3})
    assert row["ember_accuracy"] == "FAIL"
    assert row["ember_err_outputs"] == 0.5
    assert accuracy.cell(row, "ember").startswith("FAIL")


def test_gpu_bench_accuracy_parts_run_on_cpu():
    gpu_bench = importlib.import_module("gpu_bench")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    inputs = (torch.randn(3, 8),)
    reference = gpu_bench.float32_reference(model, inputs, "train")
    step = gpu_bench.make_step(model, inputs, "train")  # AMP bf16 on the CPU
    errors = gpu_bench.accuracy_errors(
        gpu_bench.accuracy_metrics(step, "train"), reference, "train"
    )
    assert set(errors) == {"loss", "grad_norm"} and 0 < errors["grad_norm"] < 0.1
    reference = gpu_bench.float32_reference(model, inputs, "infer")
    model = model.eval().to(torch.bfloat16)
    infer = gpu_bench.make_step(model, (inputs[0].bfloat16(),), "infer")
    errors = gpu_bench.accuracy_errors(
        gpu_bench.accuracy_metrics(infer, "infer"), reference, "infer"
    )
    assert 0 < errors["outputs"] < 0.1


def test_gpu_bench_markdown_shows_failing_rows():
    gpu_bench = importlib.import_module("gpu_bench")
    row = {"model": "mlp", "mode": "infer", "eager_ms": 1.0, "ember_speedup": 1.0}
    accuracy.record(row, "eager", {"outputs": 1e-3}, {"outputs": 1e-3})
    accuracy.record(row, "ember", {"outputs": 0.2}, {"outputs": 1e-3})
    result = {"device": "cpu", "copy_GBps": 1.0, "torch": "-", "triton": "-"}
    text = gpu_bench.markdown(result | {"backends": ["ember"], "rows": [row]})
    assert "FAIL 2.0e-01" in text and "accuracy: FAIL mlp infer ember" in text


def test_model_bench_float64_reference_and_table():
    model_bench = importlib.import_module("model_bench")
    from models import MODELS

    case = MODELS["mlp"]()
    reference = model_bench.float64_reference(case, training=True)
    step = model_bench.step_fn(case.model, case.inputs, case.loss, True)
    eager = model_bench.accuracy_errors(
        model_bench.measure(step, case.model, True), reference, True
    )
    assert eager["loss"] < 1e-5 and eager["grad_norm"] < 1e-5
    row = {"model": "mlp", "mode": "training", "eager_ms": 1.0}
    accuracy.record(row, "eager", eager, eager)
    accuracy.record(row, "ember", {"loss": 1.0, "grad_norm": 0.0}, eager)
    assert "| FAIL 1.0e+00 |" in model_bench.table([row])
