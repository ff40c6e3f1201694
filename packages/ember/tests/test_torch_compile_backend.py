"""ember as a torch.compile backend: the `torch_dynamo_backends` entry points in
pyproject.toml, their targets, and torch.compile(backend="ember") found through them."""

import importlib.metadata
import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

import pytest
import torch

from ember.torch_backends import ember_aot_eager, ember_inductor

PYPROJECT = pathlib.Path(__file__).parents[1] / "pyproject.toml"


def _declared():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return project["entry-points"]["torch_dynamo_backends"]


def test_pyproject_declares_the_torch_dynamo_backends():
    assert _declared() == {
        "ember": "ember.torch_backends:ember_inductor",
        "ember_aot_eager": "ember.torch_backends:ember_aot_eager",
    }


def test_entry_point_targets_load_to_the_backends():
    for name, value in _declared().items():
        entry_point = importlib.metadata.EntryPoint(name, value, "torch_dynamo_backends")
        assert (
            entry_point.load()
            is {"ember": ember_inductor, "ember_aot_eager": ember_aot_eager}[name]
        )


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize(
    "backend, dynamic",
    [(ember_inductor, False), (ember_aot_eager, None)],
    ids=["ember", "ember_aot_eager"],
)
def test_torch_compile_with_the_backend_matches_eager_forward_and_backward(backend, dynamic):
    torch._dynamo.reset()
    model = _model()
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    x = torch.randn(3, 4)
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, expected in zip(grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, expected)
    for n in (5, 7):
        y = torch.randn(n, 4)
        torch.testing.assert_close(compiled(y), model(y))


def test_torch_compile_mode_and_options_reach_ember():
    torch._dynamo.reset()
    model = _model()
    compiled = torch.compile(
        model, backend=ember_inductor, dynamic=False, options={"max_autotune": False}
    )
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    with pytest.raises(Exception, match="unknown option"):
        torch._dynamo.reset()
        torch.compile(model, backend=ember_inductor, options={"no_such": 1})(x)


def test_torch_compile_finds_the_backend_by_name_once_installed(tmp_path):
    # An installed distribution's entry points, as pip writes them from pyproject.toml.
    dist_info = tmp_path / "ember_backend_probe-0.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: ember-backend-probe\n")
    lines = "".join(f"{name} = {value}\n" for name, value in _declared().items())
    (dist_info / "entry_points.txt").write_text(f"[torch_dynamo_backends]\n{lines}")
    code = textwrap.dedent(
        """
        import torch
        assert "ember" in torch._dynamo.list_backends() and "ember_aot_eager" in torch._dynamo.list_backends()
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        x = torch.randn(2, 4)
        for name in ("ember", "ember_aot_eager"):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=name, dynamic=False)
            torch.testing.assert_close(compiled(x), model(x))
        print("found")
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.stdout.strip().endswith("found"), result.stderr[-3000:]
