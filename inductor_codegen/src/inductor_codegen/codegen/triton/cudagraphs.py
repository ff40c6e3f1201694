"""CUDA graphs: record a compiled graph once per input signature, then replay it.

`CUDAGraphRunner(fn)` wraps a callable over CUDA tensors (positional
arguments). On the first call with a new signature (sizes, strides, dtypes,
devices of the tensor inputs, values of the others) it runs `fn` once eagerly
(warm-up: kernels compile and autotune outside capture), copies the inputs
into static buffers, and records `fn` over them in a `torch.cuda.CUDAGraph`.
All graphs record into one shared memory pool. Later calls copy inputs
whose address differs from the static buffer into it and replay.

As with torch's CUDA graphs (torch.cuda.graphs, "reduce-overhead"):

* Outputs live in the graph's static memory and are OVERWRITTEN by the next
  replay of the same graph. Clone an output (`out.clone()`) to keep it past the
  next call.
* Inputs are copied into static buffers each call (one device copy per input
  whose address changed); parameters and other tensors passed at the same
  address each call cost nothing.
* Everything `fn` does must be capturable: no host synchronization, no
  data-dependent shapes. Without CUDA (or with no CUDA tensor inputs) the
  runner simply calls `fn`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CUDAGraphRunner", "cudagraph_compiler", "shared_pool"]

_POOL = None


def shared_pool():
    """The memory pool every recorded graph allocates from."""
    global _POOL
    if _POOL is None:
        _POOL = torch.cuda.graph_pool_handle()
    return _POOL


@dataclass(slots=True)
class _Recording:
    graph: object
    static_inputs: list
    static_outputs: object
    tensor_positions: tuple[int, ...]


def _signature(args) -> tuple:
    """What a recording is specialized to; cheap, since it runs on every call."""
    return tuple(
        (a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args
    )


class CUDAGraphRunner:
    """Replays `fn` through CUDA graphs, one recording per input signature."""

    def __init__(self, fn):
        self.fn = fn
        self.recordings: dict[tuple, _Recording] = {}

    def __call__(self, *args):
        if not torch.cuda.is_available() or not any(
            isinstance(a, torch.Tensor) and a.is_cuda for a in args
        ):
            return self.fn(*args)
        key = _signature(args)
        recording = self.recordings.get(key)
        if recording is None:
            recording = self._record(args)
            self.recordings[key] = recording
            return recording.static_outputs
        for position in recording.tensor_positions:
            static, new = recording.static_inputs[position], args[position]
            if static.data_ptr() != new.data_ptr():
                static.copy_(new)
        recording.graph.replay()
        return recording.static_outputs

    def call_boxed(self, args: list):
        values = list(args)
        args.clear()
        return self(*values)

    def _record(self, args) -> _Recording:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.fn(*args)  # warm-up: compile, autotune, allocate outside capture
        torch.cuda.current_stream().wait_stream(stream)
        static_inputs = [
            _static_copy(a) if isinstance(a, torch.Tensor) and a.is_cuda else a for a in args
        ]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=shared_pool()):
            static_outputs = self.fn(*static_inputs)
        graph.replay()
        positions = tuple(
            i for i, a in enumerate(static_inputs) if isinstance(a, torch.Tensor) and a.is_cuda
        )
        return _Recording(graph, static_inputs, static_outputs, positions)


def _static_copy(tensor: torch.Tensor) -> torch.Tensor:
    static = torch.empty_strided(
        tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )
    static.copy_(tensor)
    return static


def cudagraph_compiler(gm: torch.fx.GraphModule, example_inputs):
    """The `cudagraphs` backend's graph compiler: `gm` run by ATen, replayed through CUDA graphs.

    >>> compiled = cudagraph_compiler(gm, example_inputs)
    >>> outputs = compiled(*inputs)   # overwritten by the next replay: clone to keep

    Returns a positional callable (also `.call_boxed(list)`).
    """
    return CUDAGraphRunner(gm.forward if hasattr(gm, "forward") else gm)
