"""Models of the zoo (benchmarks/zoo_models.py, run by benchmarks/model_zoo.py and
`nox -s zoo`) that found bugs or cover what the model set of test_end_to_end_models.py
does not, through ember.compile(inductor) against eager, inference and a training step.

    gptj      repeat_interleave(sin, 2, 3) in its rotary embedding: its shape was taken
              as data-dependent, 10 breaks and its layers run eagerly (one graph now)
    wav2vec2  `hidden_states.requires_grad = True` in training: compiled parts around the
              assignment, the values eager's (inference: one graph)
    segformer transformers' output capturing asks `hasattr(outputs, "vision_hidden_states")`
              of a ModelOutput: capture said True (any name of a container made in the
              frame was a method), 16 breaks and eager frames (one graph now)
    mixtral   top-k expert routing (MoE), inference
    fnet      token mixing by torch.fft.fftn
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
if not (BENCHMARKS / "model_zoo.py").is_file():
    pytest.skip("benchmarks/model_zoo.py is not beside this checkout", allow_module_level=True)
sys.path.insert(0, str(BENCHMARKS))

from model_zoo import run_mode  # noqa: E402
from zoo_models import ZOO  # noqa: E402

# (model, mode) -> (status, whole graph: one graph and no break)
EXPECTED = {
    ("gptj", "inference"): ("pass", True),
    ("gptj", "training"): ("pass", True),
    ("wav2vec2", "inference"): ("pass", True),
    ("wav2vec2", "training"): ("eager", False),
    ("mixtral", "inference"): ("pass", True),
    ("segformer", "inference"): ("pass", True),
    ("segformer", "training"): ("pass", True),
    ("fnet", "inference"): ("pass", True),
    ("fnet", "training"): ("pass", True),
}


@pytest.mark.slow
@pytest.mark.parametrize("name, mode", list(EXPECTED), ids=[f"{n}-{m}" for n, m in EXPECTED])
def test_zoo_model_matches_eager(name, mode):
    row = run_mode(ZOO[name], mode)
    status, whole_graph = EXPECTED[name, mode]
    # the values are eager's in every case: "eager" means a frame ran eagerly, checked
    # against eager all the same; a mismatch or an error fails
    assert row["status"] == status, (row["status"], row["detail"], row.get("traceback"))
    if whole_graph:
        assert (row["graphs"], row["breaks"]) == (1, 0), row["break_reasons"]
