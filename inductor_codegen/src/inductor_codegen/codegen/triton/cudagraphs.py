"""CUDA graphs: record a compiled graph once per input signature, then replay it.

`CUDAGraphRunner(fn)` wraps a callable over CUDA tensors (positional
arguments). On the first call with a new signature (sizes, strides, dtypes,
devices of the tensor inputs, values of the others) it runs `fn` once eagerly
(warm-up: kernels compile and autotune outside capture), copies the inputs
into static buffers, and records `fn` over them in a `torch.cuda.CUDAGraph`.
All graphs record into one shared memory pool. Later calls copy inputs
whose address differs from the static buffer into it and replay.

As with torch's CUDA graphs (torch.cuda.graphs, "reduce-overhead"):

* Outputs live in the graph's static memory. A replay never overwrites an
  output of an earlier call that is still referenced: each call returns new
  tensor objects over the static memory, and a recording whose last outputs
  (or tensors saved from them for a backward) are still alive is not replayed.
  Another recording of the same signature is made instead, up to
  `RECORDINGS_PER_SIGNATURE` (so `out = f(x)` in a loop, which keeps the last
  call's outputs alive during the next call, alternates between two); past
  that the call runs `fn` plainly (fresh memory).
* Inputs that are not parameters are copied into static buffers each call (one
  device copy per input whose address changed). Parameters, and tensors marked
  static by torch's `mark_static_address` (the `_dynamo_static_input_type`
  attribute it sets on the tensor, read as data; HF's static cache uses it),
  are recorded at their own address: no copy, and a recording is specialized to
  those addresses. So are the inputs the graph writes in place (`pinned`: a
  static cache's `index_copy_` into the cache itself): the replay writes the
  caller's tensor, whatever its marker, and a tensor at another address gets a
  recording of its own.
* Everything `fn` does must be capturable: no host synchronization, no
  data-dependent shapes. A graph with a CPU tensor input is not recorded (a
  CPU value would be frozen into the recording, and a host-to-device copy cannot
  be captured): it runs plainly, as without CUDA.
* At most `MAX_RECORDINGS` signatures are recorded per graph (sizes that change
  on every call, as a growing key/value cache's do, would record without
  bound); later signatures run plainly.

Each reason for running plainly is logged once per graph (`EMBER_LOGS=perf_hints`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from guards import artifact_logger
from inductor_codegen.codegen.triton.runtime import wait_for_background_compiles

__all__ = [
    "CUDAGraphRunner",
    "cudagraph_compiler",
    "shared_pool",
    "MAX_RECORDINGS",
    "RECORDINGS_PER_SIGNATURE",
]

MAX_RECORDINGS = 16
RECORDINGS_PER_SIGNATURE = 3

_POOL = None
_POOL_KEEPER: list = []


def shared_pool():
    """The memory pool every recorded graph allocates from.

    The caching allocator releases a graph pool once no graph and no tensor of
    it is left, and a later capture into the released handle fails an internal
    assertion; so a small graph recorded into the pool, and its tensor, are kept
    for the life of the process.
    """
    global _POOL
    if _POOL is None:
        wait_for_background_compiles()
        pool = torch.cuda.graph_pool_handle()
        keeper = torch.cuda.CUDAGraph()
        with torch.cuda.graph(keeper, pool=pool):
            tensor = torch.zeros(1, device="cuda").add_(1)
        _POOL_KEEPER[:] = [keeper, tensor]
        _POOL = pool
    return _POOL


@dataclass(slots=True)
class _Recording:
    graph: object
    static_inputs: list
    static_outputs: object
    copied_positions: tuple[int, ...]
    handed_out: list = field(default_factory=list)  # weakrefs to the last call's outputs


def _is_static_address(tensor: torch.Tensor) -> bool:
    """Recorded at its own address: a parameter, or a tensor torch's marker calls static."""
    return isinstance(tensor, torch.nn.Parameter) or (
        getattr(tensor, "_dynamo_static_input_type", None) is not None
    )


def _signature(args, pinned: frozenset[int] = frozenset()) -> tuple:
    """What a recording is specialized to; cheap, since it runs on every call."""
    return tuple(
        (
            a.shape,
            a.stride(),
            a.dtype,
            a.device,
            a.data_ptr() if i in pinned or _is_static_address(a) else None,
        )
        if isinstance(a, torch.Tensor)
        else a
        for i, a in enumerate(args)
    )


def _map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        mapped = [_map_tensors(v, fn) for v in value]
        return mapped if isinstance(value, list) else tuple(mapped)
    return value


class CUDAGraphRunner:
    """Replays `fn` through CUDA graphs, one recording per input signature."""

    def __init__(self, fn, pinned: frozenset[int] = frozenset()):
        self.fn = fn
        # positions of inputs `fn` writes in place: always recorded at their own address
        self.pinned = frozenset(pinned)
        self.recordings: dict[tuple, list[_Recording]] = {}
        self._said: set[str] = set()

    def _plain(self, args, reason: str):
        if reason not in self._said:
            self._said.add(reason)
            artifact_logger("perf_hints").info("CUDA graphs: running a graph plainly: %s", reason)
        return self.fn(*args)

    def __call__(self, *args):
        if not torch.cuda.is_available():
            return self.fn(*args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not any(t.is_cuda for t in tensors):
            return self.fn(*args)
        if any(not t.is_cuda for t in tensors):
            return self._plain(args, "an input is a CPU tensor")
        key = _signature(args, self.pinned)
        recordings = self.recordings.get(key)
        if recordings is None:
            if len(self.recordings) >= MAX_RECORDINGS:
                return self._plain(args, f"more than {MAX_RECORDINGS} input signatures")
            recordings = self.recordings[key] = []
        recording = next((r for r in recordings if _free(r)), None)
        if recording is None:
            if len(recordings) >= RECORDINGS_PER_SIGNATURE:
                return self._plain(args, "outputs of earlier replays are still referenced")
            recording = self._record(args)
            recordings.append(recording)
            return self._hand_out(recording)
        for position in recording.copied_positions:
            static, new = recording.static_inputs[position], args[position]
            if static.data_ptr() != new.data_ptr():
                static.copy_(new)
        recording.graph.replay()
        return self._hand_out(recording)

    def call_boxed(self, args: list):
        values = list(args)
        args.clear()
        return self(*values)

    def _hand_out(self, recording: _Recording):
        """New tensor objects over the static outputs, remembered weakly for the next call."""
        refs = []

        def alias(t: torch.Tensor) -> torch.Tensor:
            out = t.detach()
            refs.append(weakref.ref(out))
            return out

        outputs = _map_tensors(recording.static_outputs, alias)
        recording.handed_out = refs
        return outputs

    def _record(self, args) -> _Recording:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        # warm-up (compile, autotune, allocate outside capture) over clones of the inputs
        # written in place: the replay below is what writes them, once
        warm = [_static_copy(a) if i in self.pinned else a for i, a in enumerate(args)]
        with torch.cuda.stream(stream):
            self.fn(*warm)
        torch.cuda.current_stream().wait_stream(stream)
        copied = tuple(
            i
            for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and i not in self.pinned and not _is_static_address(a)
        )
        static_inputs = [_static_copy(a) if i in copied else a for i, a in enumerate(args)]
        graph = torch.cuda.CUDAGraph()
        pool = shared_pool()
        wait_for_background_compiles()  # no module loads from other threads while capturing
        with torch.cuda.graph(graph, pool=pool):
            static_outputs = self.fn(*static_inputs)
        graph.replay()
        return _Recording(graph, static_inputs, static_outputs, copied)


def _free(recording: _Recording) -> bool:
    """No output handed out by the recording's last replay is referenced any more."""
    return all(ref() is None for ref in recording.handed_out)


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
