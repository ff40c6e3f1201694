"""Regional compilation: the calls of identical blocks are compiled once (ember.regions).

Every test compares against eager PyTorch; the plan tests look at which pieces the
captured graph is cut into and how many distinct ones are compiled.
"""

from __future__ import annotations

import operator
import re

import pytest
import torch
from torch import nn

import ember
from ember import regions
from ember.regions import chain, plan_pieces, regional


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        h = torch.nn.functional.gelu(self.up(h))
        h = self.down(h) * 0.5 + h[..., : x.shape[-1]].sigmoid()
        return x + torch.tanh(h) * torch.sin(x)


class Stack(nn.Module):
    def __init__(self, depth: int = 4, width: int = 16, block: type = Block) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.layers = nn.ModuleList(block(width) for _ in range(depth))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def _captured(model: nn.Module, *inputs: torch.Tensor, dynamic: bool | None = None) -> list:
    graphs = []

    def record(gm: torch.fx.GraphModule, example_inputs: list):
        graphs.append((gm, example_inputs))
        return gm.forward

    ember.compile(model, backend=record, dynamic=dynamic)(*inputs)
    return graphs


def _distinct(pieces: list) -> int:
    return len({piece.signature for piece in pieces})


def _assert_training_step_matches_eager(compiled, model, x):
    """One step of `compiled` (output and parameter gradients) equals eager's on `model`."""
    model.zero_grad()  # an earlier step's gradients would be added to
    out = compiled(x)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    for got, parameter in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(got, parameter.grad)


def test_identical_blocks_are_one_region_compiled_once():
    torch.manual_seed(0)
    model = Stack(depth=5)
    x = torch.randn(4, 8)
    ((gm, examples),) = _captured(model, x)
    pieces = plan_pieces(gm)
    assert pieces is not None
    assert [piece.region.split(" ")[-1] for piece in pieces if piece.region] == ["(Block)"] * 5
    compiled = []

    def counting(graph, inputs):
        compiled.append(graph)
        return graph.forward

    run = regional(counting)(gm, examples)
    assert len(compiled) == _distinct(pieces) == 3  # embed, the block, the head
    torch.testing.assert_close(run(*examples)[0], model(x))


def test_two_copies_of_a_block_compile_in_the_whole_graph():
    # two blocks save little compile time; the whole graph fuses across their edges
    torch.manual_seed(0)
    model = Stack(depth=2)
    x = torch.randn(4, 8)
    ((gm, examples),) = _captured(model, x)
    assert plan_pieces(gm, examples) is None
    ((gm, examples),) = _captured(Stack(depth=3), x)
    assert len([piece for piece in plan_pieces(gm, examples) if piece.region]) == 3
    torch.testing.assert_close(ember.compile(model)(x), model(x))


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_regional_blocks_match_eager_inference_and_training(backend):
    torch.manual_seed(0)
    model = Stack(depth=4)
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    _assert_training_step_matches_eager(compiled, model, x)


def test_regional_blocks_with_symbolic_sizes_match_eager():
    torch.manual_seed(0)
    model = Stack(depth=3)
    compiled = ember.compile(model, dynamic=True)
    for rows in (3, 7, 5):
        x = torch.randn(rows, 8, requires_grad=True)
        out = compiled(x)
        out.sum().backward()
        grad = x.grad.clone()
        x.grad = None
        expected = model(x)
        expected.sum().backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(grad, x.grad)


def test_block_with_a_hook_is_not_merged():
    torch.manual_seed(0)
    model = Stack(depth=4)
    model.layers[2].register_forward_hook(lambda module, args, out: out * 2)
    x = torch.randn(4, 8)
    ((gm, _),) = _captured(model, x)
    pieces = plan_pieces(gm)
    regions = [piece for piece in pieces if piece.region]
    assert [piece.region.split(" ")[0] for piece in regions] == [
        "self.layers.0",
        "self.layers.1",
        "self.layers.3",
    ]
    torch.testing.assert_close(ember.compile(model)(x), model(x))


def test_block_of_another_shape_is_not_merged():
    torch.manual_seed(0)
    model = Stack(depth=3)
    model.layers.append(Block(16))
    model.layers[3].up = nn.Linear(16, 48)
    model.layers[3].down = nn.Linear(48, 16)
    x = torch.randn(4, 8)
    ((gm, _),) = _captured(model, x)
    pieces = plan_pieces(gm)
    assert len([piece for piece in pieces if piece.region]) == 3
    assert _distinct(pieces) == 3  # embed, the block, the wider block with the head
    torch.testing.assert_close(ember.compile(model)(x), model(x))


class ScaledBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * getattr(self, "scale", 1.0)


def test_block_reading_an_extra_attribute_is_not_merged():
    torch.manual_seed(0)
    model = Stack(depth=4, block=ScaledBlock)
    model.layers[1].scale = 3.0
    x = torch.randn(4, 8)
    ((gm, _),) = _captured(model, x)
    pieces = plan_pieces(gm)
    merged = [piece.region.split(" ")[0] for piece in pieces if piece.region]
    assert "self.layers.1" not in merged and len(merged) == 3
    torch.testing.assert_close(ember.compile(model)(x), model(x))


class InPlaceBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        x.mul_(0.5)
        return out + x


def test_blocks_writing_in_place_compile_whole():
    torch.manual_seed(0)
    model = Stack(depth=3, block=InPlaceBlock)
    x = torch.randn(4, 8)
    ((gm, _),) = _captured(model, x)
    assert plan_pieces(gm) is None
    torch.testing.assert_close(ember.compile(model)(x), model(x))


def test_regional_false_compiles_the_whole_graph():
    torch.manual_seed(0)
    model = Stack(depth=3)
    x = torch.randn(4, 8)
    compiled = ember.compile(model, options={"regional": False})
    torch.testing.assert_close(compiled(x), model(x))
    whole = ember.last_artifacts(compiled).parts[0].kernels
    cut = ember.compile(model)
    torch.testing.assert_close(cut(x), model(x))
    pieces = ember.last_artifacts(cut).parts[0].kernels
    assert whole and pieces and whole != pieces
    with pytest.raises(ember.InvalidArgumentError, match="regional"):
        ember.compile(model, options={"regional": "yes"})


def test_small_repeated_calls_stay_in_the_graph():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    x = torch.randn(2, 8)
    ((gm, _),) = _captured(model, x)
    assert plan_pieces(gm) is None


def test_gpt2_blocks_compiled_once_match_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=3, n_embd=32, n_head=2, n_positions=64, vocab_size=101,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2Model(config)
    ids = torch.randint(0, 101, (2, 12))
    ((gm, _),) = _captured(model.eval(), ids)
    pieces = plan_pieces(gm)
    names = [p.region.split(" ")[0] for p in pieces if p.region]
    # the blocks, or (with transformers versions whose block calls differ by layer, so the
    # blocks' graphs do) each block's attention and MLP
    assert names in (
        [f"self.h.{i}" for i in range(3)],
        [f"self.h.{i}.{part}" for i in range(3) for part in ("attn", "mlp")],
    ), names
    assert _distinct([p for p in pieces if p.region]) < len(names)
    compiled = ember.compile(model)
    model.train()
    out = compiled(ids).last_hidden_state
    out.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    expected = model(ids).last_hidden_state
    expected.square().mean().backward()
    torch.testing.assert_close(out, expected)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(grads[name], parameter.grad, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Triton kernels)")
def test_regional_blocks_on_gpu_match_eager():
    torch.manual_seed(0)
    model = Stack(depth=4).cuda()
    x = torch.randn(4, 8, device="cuda")
    compiled = ember.compile(model, options={"regional": True})  # CUDA graphs: whole by default
    _assert_training_step_matches_eager(compiled, model, x)
    assert "triton" in ember.last_artifacts(compiled).parts[0].kernels
    whole = ember.compile(model)
    _assert_training_step_matches_eager(whole, model, x)


class NormBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(width, width, 3, padding=1)
        self.norm = nn.BatchNorm1d(width)
        self.conv2 = nn.Conv1d(width, width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.conv(x)))
        h = self.conv2(h).sigmoid() * h + h.mean(dim=-1, keepdim=True)
        return x + torch.tanh(h) - 0.5 * torch.sin(h)


class NormStack(nn.Module):
    def __init__(self, depth: int = 3, width: int = 6) -> None:
        super().__init__()
        self.stem = nn.Conv1d(width, width, 1)
        self.layers = nn.ModuleList(NormBlock(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for layer in self.layers:
            x = layer(x)
        return x


def test_regional_blocks_update_their_own_batch_norm_statistics():
    torch.manual_seed(0)
    model = NormStack()
    reference = NormStack()
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model)
    for _ in range(2):
        x = torch.randn(4, 6, 10)
        compiled(x).sum().backward()
        reference(x).sum().backward()
    ((gm, examples),) = _captured(NormStack(), torch.randn(4, 6, 10))
    assert len([piece for piece in plan_pieces(gm, examples) if piece.region]) == 3
    for (name, got), expected in zip(
        model.state_dict().items(), reference.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(got, expected, msg=name)
    for got, expected in zip(model.parameters(), reference.parameters(), strict=True):
        # A convolution's bias before a training-mode batch norm has a gradient of zero in
        # exact arithmetic: what both sides hold is the rounding of sums of terms around
        # 20 (eager 2e-6, compiled 1e-5, by summation order), hence the absolute 1e-4.
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-4)


def test_regional_pieces_warm_start_bit_for_bit(tmp_path, monkeypatch):
    from ember import warm_cache

    monkeypatch.setenv("EMBER_WARM_START", "1")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_REMOTE_CACHE", raising=False)
    warm_cache.STATS.clear()
    torch.manual_seed(0)
    model = Stack(depth=4)
    x = torch.randn(4, 8)

    def step():
        ember.reset()
        model.zero_grad()
        out = ember.compile(model)(x)
        out.sin().sum().backward()
        return [out.detach().clone()] + [p.grad.clone() for p in model.parameters()]

    try:
        cold = step()
        assert (warm_cache.STATS["hits"], warm_cache.STATS["stored"]) == (0, 3)
        again = step()
        assert (warm_cache.STATS["hits"], warm_cache.STATS["stored"]) == (3, 3)
    finally:
        ember.reset()
    assert all(torch.equal(a, b) for a, b in zip(cold, again, strict=True))
    torch.testing.assert_close(again[0], model(x))


TRITON_PIECES = """
import os, sys
sys.path.insert(0, {tests!r})
import torch, ember
from aot_autograd import aot_graph
from inductor_codegen import compile_graph
from prim_decomp import inductor_default
from ember.regions import regional
from test_regional_compile import Stack, _captured
torch.manual_seed(0)
model, x = Stack(depth=3), torch.randn(4, 8)
((gm, examples),) = _captured(model, x)
compiled, kernels = [], []
def triton(graph, inputs):
    compiled.append(graph)
    def part(g, i):
        made = compile_graph(g, i, options={{"device_codegen": "triton"}})
        kernels.extend(a.text for a in made.artifacts if a.name == "codegen")
        return made
    return aot_graph(graph, inputs, fw_compiler=part, bw_compiler=part,
                     inference_compiler=part, decompositions=inductor_default)
out = regional(triton)(gm, examples)(*examples)[0]
out.square().sum().backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
expected = model(x)
expected.square().sum().backward()
torch.testing.assert_close(out, expected)
for got, parameter in zip(grads, model.parameters()):
    torch.testing.assert_close(got, parameter.grad)
assert len(compiled) == 3, len(compiled)
assert any("@triton.jit" in text for text in kernels), kernels
"""


def test_regional_pieces_compiled_to_triton_match_eager():
    """The Triton path (TRITON_INTERPRET=1 on the CPU), in a process of its own: Triton
    reads the variable when it is first imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton")
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", TRITON_PIECES.format(tests=str(tests))],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_piece_that_does_not_compile_falls_back_to_the_whole_graph():
    torch.manual_seed(0)
    model = Stack(depth=3)
    x = torch.randn(4, 8)
    ((gm, examples),) = _captured(model, x)
    calls = []

    def picky(graph, inputs):
        calls.append(graph)
        if graph is not gm:
            raise RuntimeError("pieces are not supported here")
        return graph.forward

    run = regional(picky)(gm, examples)
    assert calls[-1] is gm
    torch.testing.assert_close(run(*examples)[0], model(x))


def _transformer_stack(kind: str, depth: int) -> nn.Module:
    """A GPT-2 or Llama model of `depth` layers from benchmarks/models.py, no KV cache."""
    import sys
    from pathlib import Path

    pytest.importorskip("transformers")
    benchmarks = Path(__file__).resolve().parents[3] / "benchmarks"
    if not (benchmarks / "models.py").exists():
        pytest.skip("benchmarks/models.py is not beside this checkout")
    sys.path.insert(0, str(benchmarks))
    import models

    torch.manual_seed(0)
    if kind == "gpt2":
        return models.transformers_model(
            "GPT2LMHeadModel", "GPT2Config", n_layer=depth, n_head=4, n_embd=32,
            vocab_size=101, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            use_cache=False,
        )  # fmt: skip
    return models.transformers_model(
        "LlamaForCausalLM", "LlamaConfig", num_hidden_layers=depth, num_attention_heads=4,
        num_key_value_heads=2, hidden_size=32, intermediate_size=64, vocab_size=101,
        max_position_embeddings=64, use_cache=False,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_transformer_blocks_replayed_by_capture_train_like_eager(kind, monkeypatch):
    from dynamo_capture import region_reuse

    replayed = []
    replay = region_reuse._replay

    def counting(tx, template, module_value, tensors):
        result = replay(tx, template, module_value, tensors)
        replayed.append(module_value.source.name)
        return result

    monkeypatch.setattr(region_reuse, "_replay", counting)
    model = _transformer_stack(kind, depth=4).train()
    ids = torch.randint(0, 101, (2, 12))
    compiled = ember.compile(model, backend="aot_eager")
    for step in range(2):
        out = compiled(ids).logits
        out.sin().mean().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        model.zero_grad()
        expected = model(ids).logits
        expected.sin().mean().backward()
        torch.testing.assert_close(out, expected)
        for name, parameter in model.named_parameters():
            torch.testing.assert_close(grads[name], parameter.grad, msg=name)
        model.zero_grad()
        if step == 0:
            # blocks 1 to 3 replay block 0's capture; the graph is still cut at them
            # (whole decoder layers, or their attention and MLP blocks, by the
            # transformers version's module structure)
            layers = {m for name in replayed for m in re.findall(r"(?<=[.\[])\d+(?=[.\]]|$)", name)}
            assert layers >= {"1", "2", "3"}, replayed
            ((gm, examples),) = _captured(model, ids)
            # (transformers versions whose rotary embedding runs without grad and with
            # autocast off: those switches run between the pieces)
            pieces = plan_pieces(gm, examples)
            assert pieces is not None, regions._why_whole(gm, examples)
            assert len([p for p in pieces if p.region]) >= 4


@pytest.mark.parametrize("change", ["eval", "attribute", "shape"])
def test_one_transformer_block_changed_after_the_compile_recompiles(change):
    model = _transformer_stack("llama", depth=4).train()
    ids = torch.randint(0, 101, (2, 12))
    compiled = ember.compile(model, backend="aot_eager")
    torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
    layer = model.model.layers[2]
    if change == "eval":
        layer.eval()
        layer.mlp.act_fn = nn.Identity().eval()
    elif change == "attribute":
        layer.self_attn.scaling = layer.self_attn.scaling * 3
    else:
        layer.mlp.down_proj = nn.Linear(64, 32, bias=True)
    torch.testing.assert_close(compiled(ids).logits, model(ids).logits)


class MaskBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = (x > -1) & (x < 1)  # operator.and_: computes a new tensor
        return super().forward(x).where(keep, x)


def test_blocks_combining_masks_with_and_are_cut_into_regions():
    torch.manual_seed(0)
    model = Stack(depth=3, block=MaskBlock)
    x = torch.randn(4, 8)
    ((gm, examples),) = _captured(model, x)
    assert len([piece for piece in plan_pieces(gm, examples) if piece.region]) == 3
    _assert_training_step_matches_eager(ember.compile(model), model, x)


@pytest.mark.parametrize(
    ("setting", "on_gpu", "expected"),
    [(None, False, "cut"), (None, True, "whole"), (True, True, "cut"), (False, False, "whole")],
)
def test_regional_default_cuts_cpu_graphs_and_compiles_cuda_graphs_whole(
    monkeypatch, setting, on_gpu, expected
):
    from ember import backends, regions

    monkeypatch.setattr(regions, "regional", lambda compile_graph: lambda gm, ex: "cut")
    monkeypatch.setattr(backends, "_on_gpu", lambda example_inputs: on_gpu)
    backend = backends._regional(lambda gm, ex: "whole", {"regional": setting})
    assert backend(None, []) == expected


def test_regional_pieces_build_their_kernels_in_one_batch_each_way(monkeypatch):
    """Forward kernels of every piece in one batch (at compile), backward kernels in one
    more (the first backward): not one C++ build per piece."""
    from inductor_codegen.codegen.cpp import build

    batched, alone = [], []
    original = build.KernelLibrary.build

    def counted(self, kernels, workers=None):
        (batched if build._BATCH.get() is not None else alone).append(len(kernels))
        return original(self, kernels, workers)

    monkeypatch.setattr(build.KernelLibrary, "build", counted)
    torch.manual_seed(0)
    model = Stack(depth=4)
    compiled = ember.compile(model, backend="inductor", options={"regional": True})
    x = torch.randn(2, 5, 8)
    _assert_training_step_matches_eager(compiled, model, x)
    assert alone == []
    assert len(batched) == 6  # three distinct pieces, forward and backward


def test_chained_pieces_are_called_as_functions_and_equal_pieces_share_one():
    torch.manual_seed(0)
    model = Stack(depth=4).eval()
    x = torch.randn(2, 5, 8)
    ((gm, example_inputs),) = _captured(model, x)
    pieces = plan_pieces(gm, example_inputs)
    assert pieces is not None
    by_signature = {p.signature: p.module(gm).forward for p in pieces}
    top = chain(gm, pieces, [by_signature[p.signature] for p in pieces])
    ops = [node.op for node in top.graph.nodes]
    assert "call_module" not in ops and not list(top.children())
    targets = {node.target for node in top.graph.nodes if node.op == "call_function"}
    assert len(targets - {operator.getitem}) == _distinct(pieces)
    with torch.no_grad():
        torch.testing.assert_close(top(*example_inputs), gm(*example_inputs))
