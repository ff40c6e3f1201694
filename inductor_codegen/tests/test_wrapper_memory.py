"""The generated wrapper's memory: every buffer is freed at its last use or reused.

A buffer that no later kernel output takes over is deleted right after its last
use (an extern convolution's or matmul's input, a weight converted to another
layout); it does not wait in the reuse pool until the call returns. Checked on
the wrapper's text and by the live bytes of a call under a dispatch mode that
tracks every tensor the call allocates.

The Triton generator's tests run CUDA tensors where there is a GPU, and CPU tensors
under the interpreter (TRITON_INTERPRET=1, set by conftest) where there is none.
"""

from __future__ import annotations

import re
import weakref

import pytest
import torch
from graph_helpers import check, trace
from models import TransformerBlock
from torch.utils._python_dispatch import TorchDispatchMode

from inductor_codegen import compile_graph

# Where the Triton generator's kernels run: a GPU, else the interpreter on the CPU.
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class LiveBytes(TorchDispatchMode):
    """The peak of the bytes held by storages the ops under it created."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.current = self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        inputs = {t.untyped_storage().data_ptr() for t in leaves if isinstance(t, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            key = t.untyped_storage().data_ptr()
            if key == 0 or (key in inputs and key not in self.live):
                continue
            entry = self.live.get(key)
            if entry is None:
                entry = self.live[key] = [t.untyped_storage().nbytes(), 0]
                self.current += entry[0]
                self.peak = max(self.peak, self.current)
            entry[1] += 1
            weakref.finalize(t, self._release, key)
        return out


def _peak(fn, *args) -> int:
    with torch.no_grad():
        mode = LiveBytes()
        with mode:
            fn(*args)
        return mode.peak


def _unfreed(wrapper: str) -> list[str]:
    """Buffers allocated in the wrapper that are neither deleted, reused nor returned."""
    body, _, returned = wrapper.partition("\n    return ")
    allocated = re.findall(r"^    (buf\d+) = torch\.empty_strided", body, re.M)
    released = set(re.findall(r"^    del (buf\d+)", body, re.M))
    released |= set(re.findall(r"# reuses (buf\d+)$", body, re.M))
    outputs = set(re.findall(r"\bbuf\d+\b", returned.split("\n")[0]))
    return [name for name in allocated if name not in released | outputs]


def test_extern_inputs_of_distinct_sizes_are_freed_after_their_matmul():
    weights = [torch.randn(16 * (i + 1), 4) for i in range(4)]

    def fn(x):
        total = 0
        for i, w in enumerate(weights):
            total = total + ((x[:, : 16 * (i + 1)].exp() + 1) @ w).sum()
        return total

    x = torch.randn(64, 64)
    compiled = check(fn, x, rtol=1e-4, atol=1e-4)
    wrapper = compiled.artifact("wrapper")
    assert _unfreed(wrapper) == [], wrapper
    # Each (64, 16k) input lives only until its matmul: at most two at a time, not all four.
    largest = 64 * 64 * 4
    assert _peak(compiled, x) <= 2 * largest + 4096, wrapper


def test_channels_last_weight_copy_is_freed_after_its_convolution():
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    norm = torch.nn.BatchNorm2d(8).eval()

    def fn(x):
        return torch.relu(norm(conv(x))).sum((2, 3))

    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled = check(fn, x, rtol=1e-4, atol=1e-4)
        wrapper = compiled.artifact("wrapper")
        assert _unfreed(wrapper) == [], wrapper
        assert _peak(compiled, x) <= _peak(fn, x), wrapper


def test_pooled_buffer_is_still_reused_when_a_later_output_takes_it():
    w = torch.randn(16, 16)

    def chain(x):
        a = (x.exp() + 1) @ w
        b = (a.sin() + 1) @ w
        return (b.cos() + 1) @ w

    compiled = check(chain, torch.randn(16, 16), rtol=1e-4, atol=1e-4)
    wrapper = compiled.artifact("wrapper")
    assert "# reuses" in wrapper
    assert _unfreed(wrapper) == [], wrapper


def test_buffer_is_not_held_for_reuse_across_the_peak():
    w1, w2, w3 = (torch.randn(*size) / 16 for size in ((64, 256), (256, 64), (64, 8)))

    def fn(x):
        a = x.exp() + 1  # 16 KiB, last read by the first matmul
        b = (a @ w1).relu() + 1  # the peak: the 64 KiB matmul result and this 64 KiB buffer
        c = ((b @ w2).cos() + 1) @ w3  # a 16 KiB buffer again: could take over `a`'s
        return c

    x = torch.randn(64, 64) / 4
    compiled = check(fn, x, rtol=1e-4, atol=1e-4)
    wrapper = compiled.artifact("wrapper")
    assert _unfreed(wrapper) == [], wrapper
    # Holding `a` until the cos kernel would add its 16 KiB to the 128 KiB peak.
    assert _peak(compiled, x) <= 2 * 64 * 1024 + 1024, wrapper


def _triton_compile(fn, *args):
    pytest.importorskip("triton")
    gm = trace(fn, *args)
    return compile_graph(gm, list(args), options={"device_codegen": "triton"})


PATHS = ["cpp", pytest.param("triton", marks=pytest.mark.triton_interpret)]


def _device(path: str) -> str:
    """The device of a path's tensors: the C++ generator's are on the CPU."""
    return TRITON_DEVICE if path == "triton" else "cpu"


def _compile_on(path, fn, *args):
    if path == "triton":
        return _triton_compile(fn, *args)
    return check(fn, *args, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", PATHS)
def test_transformer_block_peak_stays_within_eager(path):
    block = TransformerBlock(dim=32, heads=4).eval().to(_device(path))
    x = torch.randn(2, 16, 32, device=_device(path))
    with torch.no_grad():
        compiled = _compile_on(path, block, x)
        torch.testing.assert_close(compiled(x), block(x), rtol=1e-4, atol=1e-4)
        wrapper = compiled.artifact("wrapper")
        assert _unfreed(wrapper) == [], wrapper
        # Freed at last use, each buffer allocated once: never above eager, which frees
        # each temporary when Python drops it.
        assert _peak(compiled, x) <= _peak(block, x), wrapper


@pytest.mark.parametrize("path", PATHS)
def test_language_model_head_logits_are_allocated_once(path):
    torch.manual_seed(0)
    device = _device(path)
    block = TransformerBlock(dim=32, heads=4).eval().to(device)
    norm = torch.nn.LayerNorm(32).to(device)
    vocab = torch.randn(2048, 32, device=device) / 8

    def lm(x):
        return norm(block(x)) @ vocab.t()

    x = torch.randn(2, 16, 32, device=device)
    with torch.no_grad():
        compiled = _compile_on(path, lm, x)
        torch.testing.assert_close(compiled(x), lm(x), rtol=1e-4, atol=1e-4)
        wrapper = compiled.artifact("wrapper")
        logits = 2 * 16 * 2048 * 4  # 256 KiB
        # The bound: the logits once, plus the block's activations alive at the head
        # (each at most the 16 KiB of fc1's output); a second logits-sized buffer
        # (a copy, a cast, a scratch buffer of the same size) exceeds it.
        assert _peak(compiled, x) <= logits + 4 * 16 * 1024, wrapper


@pytest.mark.parametrize("path", PATHS)
def test_graph_outputs_are_never_reused_as_scratch(path):
    def fn(x):
        first = x.exp()  # an output, last read by the kernel below
        scratch = (first * 2).sin()  # same size: would take over `first` if pooled
        later = (scratch + 1).cos()
        return first, later.t(), (later * scratch).sum(0)

    x = torch.randn(32, 32, device=_device(path))
    compiled = _compile_on(path, fn, x)
    first, later_t, total = compiled(x)
    expected = fn(x)
    torch.testing.assert_close((first, later_t, total), expected, rtol=1e-4, atol=1e-4)
    storages = {t.untyped_storage().data_ptr() for t in (first, later_t, total)}
    assert len(storages) == 3, compiled.artifact("wrapper")
    assert x.untyped_storage().data_ptr() not in storages


def _in_place_lines(wrapper: str) -> list[str]:
    """The `out = taken  # in place` lines, each checked: `taken` is read by the one
    kernel call that follows and by nothing after it (deleted, never returned)."""
    lines = wrapper.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.endswith("# in place"):
            continue
        taken = line.split(" = ")[1].split()[0]
        call = next(j for j in range(i + 1, len(lines)) if ".launch(" in lines[j])
        later = [ln for ln in lines[call + 1 :] if re.search(rf"\b{taken}\b", ln)]
        assert all(ln.strip().startswith("del ") for ln in later), wrapper
        found.append(line.strip())
    return found


@pytest.mark.triton_interpret
def test_pointwise_kernel_computes_into_its_dying_matmul_result():
    w1 = torch.randn(32, 128, device=TRITON_DEVICE) / 8
    w2 = torch.randn(128, 32, device=TRITON_DEVICE) / 8

    def mlp(x):
        return torch.nn.functional.gelu(x @ w1, approximate="tanh") @ w2

    x = torch.randn(64, 32, device=TRITON_DEVICE)
    compiled = _triton_compile(mlp, x)
    torch.testing.assert_close(compiled(x), mlp(x), rtol=1e-4, atol=1e-4)
    wrapper = compiled.artifact("wrapper")
    assert len(_in_place_lines(wrapper)) == 1, wrapper
    # The GELU takes over the product's 32 KiB: one hidden activation at a time.
    hidden = 64 * 128 * 4
    assert _peak(compiled, x) <= hidden + 64 * 32 * 4 + 1024, wrapper


@pytest.mark.triton_interpret
def test_input_read_at_other_elements_is_not_overwritten_in_place():
    w = torch.randn(32, 32, device=TRITON_DEVICE) / 4

    def fn(x):
        y = x @ w
        # each element reads y at its transposed position and its row's first element
        return (y.t() + y[:, :1]).sin() @ w

    x = torch.randn(32, 32, device=TRITON_DEVICE)
    compiled = _triton_compile(fn, x)
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    assert _in_place_lines(compiled.artifact("wrapper")) == []


@pytest.mark.triton_interpret
def test_input_still_needed_or_returned_is_not_overwritten_in_place():
    w = torch.randn(32, 32, device=TRITON_DEVICE) / 4

    def later_read(x):
        y = x @ w
        z = y.sin()  # y is read again below: it must keep its values
        return (z @ w) + y

    def returned(x):
        y = x @ w
        return y, y.sin() @ w

    x = torch.randn(32, 32, device=TRITON_DEVICE)
    for fn in (later_read, returned):
        compiled = _triton_compile(fn, x)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
        _in_place_lines(compiled.artifact("wrapper"))
    outputs = _triton_compile(returned, x)(x)
    assert outputs[0].untyped_storage().data_ptr() != outputs[1].untyped_storage().data_ptr()


def test_cpp_kernels_never_share_an_input_and_output_buffer():
    w1, w2 = torch.randn(32, 128) / 8, torch.randn(128, 32) / 8

    def mlp(x):
        return torch.nn.functional.gelu(x @ w1) @ w2

    compiled = check(mlp, torch.randn(64, 32), rtol=1e-4, atol=1e-4)
    # C++ kernels declare their pointers __restrict__: no output aliases an input.
    assert _in_place_lines(compiled.artifact("wrapper")) == []
