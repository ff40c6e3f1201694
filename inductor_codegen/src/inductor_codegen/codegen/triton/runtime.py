"""Loading generated Triton kernels and launching them.

Kernel modules are written to `<cache>/triton/kernels/<hash>.py` (a real file:
Triton reads the source, tracebacks show it) and imported, several at once.
Triton caches the compiled binaries itself, keyed by source and target.

`TritonKernel` launches one kernel: with the configuration the heuristics
chose, or, with max_autotune, with the fastest of `autotune_configs` measured
on the first call. Winners are stored as small JSON files under
`<cache>/triton/autotune/`, keyed by the kernel source, the device and the
Triton version, so later processes skip the measurement.

Launchers (the C stub Triton builds per argument signature) are built under one lock,
and a binary is checked to take its kernel's arguments before its first launch
(`Launcher.checked_binary`; see the note at `_LAUNCHER_BUILD`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import linecache
import os
import re
import sys
import threading
import types
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import torch

from guards import artifact_logger
from guards.cache_root import (
    cache_folder,
    discard,
    load_record,
    private_temporary_root,
    read_private,
    store_record,
    write_private,
)
from inductor_codegen.codegen.triton.heuristics import (
    LaunchConfig,
    autotune_configs,
    default_config,
)
from inductor_codegen.codegen.triton.kernel import TritonKernelSource

__all__ = [
    "KernelBinaryMismatch",
    "Launcher",
    "TritonKernel",
    "binary_mismatch",
    "build_launcher",
    "entry_arity",
    "interpreting",
    "libdevice_module",
    "load_kernels",
    "compile_pool",
    "precompile",
    "wait_for_background_compiles",
]

SCHEMA_VERSION = 1
FAST_LAUNCH = os.environ.get("EMBER_TRITON_FAST_LAUNCH", "1") != "0"
# The direct launches a kernel with symbolic sizes keeps, one per set of size values (a
# decode step's cache length); past this many they are dropped and made again.
SIZED_DIRECT_LIMIT = 4096
_XNUMEL_NAMES = {"max": max, "min": min}
MODULE_HEADER = """\
import triton
import triton.language as tl

from inductor_codegen.codegen.triton.prelude import *  # noqa: F403
from inductor_codegen.codegen.triton.runtime import libdevice_module

libdevice = libdevice_module()


"""


def interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def libdevice_module():
    """Triton's CUDA libdevice, or its numpy stand-in under the interpreter."""
    if interpreting():
        from inductor_codegen.codegen.triton.interpreter_math import libdevice

        return libdevice
    from triton.language.extra import libdevice

    return libdevice


def kernel_function_name(source: TritonKernelSource) -> str:
    """The name of the Triton function for `source`: its kind and a digest of its text.

    Kernels with the same text (the same fused ops of every layer of a model) get
    the same function, compiled once: Triton's cache key is the function's source,
    name included, so per-step names would compile each layer's copy again.
    """
    kind = source.name.rstrip("0123456789").rstrip("_") or "triton_kernel"
    digest = hashlib.sha256(source.source.encode()).hexdigest()[:12]
    return f"{kind[:48]}_{digest}"


def kernel_module_text(source: TritonKernelSource) -> str:
    return MODULE_HEADER + source.source.replace("KERNEL_NAME", kernel_function_name(source))


def _import(path: Path, name: str, text: str):
    """`name` from the module `text`, which was written to (and checked at) `path`."""
    module_name = f"ember_triton_{path.stem}"
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], name)
    # NOTE: compiled from the checked text, not re-read from disk; linecache holds the
    # same text, so Triton (which reads a kernel's source) and tracebacks see it.
    linecache.cache[str(path)] = (len(text), None, text.splitlines(True), str(path))
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)
    except BaseException:
        del sys.modules[module_name]
        raise
    return getattr(module, name)


def _write_module(path: Path, text: str) -> None:
    """Make `path` hold exactly `text` (written atomically when it does not)."""
    data = text.encode()
    try:
        existing = read_private(path)
    except OSError as error:
        existing = None
        discard(path, str(error))
    if existing == data:
        return
    if existing is not None:
        discard(path, "its contents do not match the kernel it is named after")
    write_private(path, data)


def load_kernels(sources: list[TritonKernelSource], folder: Path, workers: int | None = None):
    """{kernel name: (jit function, module path)}: one module per distinct kernel text,
    written once by content hash and imported in parallel; steps with the same text
    share the function (and so its compiled binaries)."""
    kernel_dir = cache_folder("kernels", root=folder)
    modules: dict[Path, tuple[str, str]] = {}  # module path -> its function's name, text
    paths = {}
    for source in sources:
        function = kernel_function_name(source)
        path = kernel_dir / f"{function}.py"
        if path not in modules:
            text = kernel_module_text(source)
            try:
                _write_module(path, text)
            except OSError as error:  # the cache filled up or became read-only meanwhile
                root = private_temporary_root(kernel_dir, f"failed: {error}")
                kernel_dir = cache_folder("triton", "kernels", root=root)
                path = kernel_dir / path.name
                _write_module(path, text)
            modules[path] = (function, text)
        paths[source.name] = path
    with ThreadPoolExecutor(max_workers=workers or min(8, len(modules) or 1)) as pool:
        functions = dict(
            zip(modules, pool.map(lambda item: _import(item[0], *item[1]), modules.items()))
        )
    return {name: (functions[path], path) for name, path in paths.items()}


def _specialization(value) -> object:
    """What Triton specializes a compiled kernel on: pointer alignment, integers 1 and % 16,
    and an integer's type (32 bits, or 64 for a value outside int32), which Triton picks by
    value even for an argument it does not specialize."""
    if isinstance(value, torch.Tensor):
        return value.data_ptr() % 16 == 0
    if isinstance(value, int) and not isinstance(value, bool):
        return (value == 1, value % 16 == 0, -(2**31) <= value < 2**31)
    return None


def specialization_key(args) -> tuple:
    """`_specialization` of every argument, with tensors (most arguments) handled inline."""
    tensor = torch.Tensor
    return tuple(
        [a.data_ptr() % 16 == 0 if isinstance(a, tensor) else _specialization(a) for a in args]
    )


class KernelBinaryMismatch(RuntimeError):
    """A compiled kernel, or the launcher Triton built for it, takes other arguments than the
    kernel's source: launching it would read the arguments wrongly, so it is never launched."""


class Launcher:
    """Launches one kernel with one grid and one configuration, at a low cost per call.

    The first call for a specialization of the arguments finds (or compiles) the
    binary through Triton's JIT, checks that it and its launcher take this
    kernel's arguments (`binary_mismatch`), and launches it; later calls with the
    same specialization call the compiled binary's launcher directly, skipping
    the argument binding, which dominates the launch time of small kernels.
    EMBER_TRITON_FAST_LAUNCH=0 turns the shortcut off.
    """

    def __init__(self, fn, grid: tuple[int, int, int], constexprs: dict, options: dict):
        self.fn = fn
        self.grid = grid
        self.constexprs = constexprs
        self.constexpr_values = tuple(constexprs.values())
        self.options = options
        self.runners: dict[tuple, object] = {}
        self.binaries: dict[tuple, object] = {}  # the compiled kernel of each specialization
        self.fast = FAST_LAUNCH and not interpreting()
        self.checked = not interpreting()  # binaries are checked before their first launch

    def __call__(self, args) -> None:
        if self.fast:
            key = specialization_key(args)
            runner = self.runners.get(key)
            if runner is not None:
                try:
                    runner(*args, *self.constexpr_values)
                    return
                except TypeError as error:  # a launcher that takes other arguments
                    artifact_logger("perf_hints").info("fast launch off: %s", error)
                    self.fast = False
        compiled = self.checked_binary(args) if self.checked else None
        if compiled is None:  # the interpreter: Triton's JIT entry
            self.fn[self.grid](*args, **self.constexprs, **self.options)
            return
        try:
            runner = compiled[self.grid]
        except Exception as error:  # a Triton without the launcher shortcut
            artifact_logger("perf_hints").info("fast launch off: %s", error)
            self.fast = False
            self.fn[self.grid](*args, **self.constexprs, **self.options)
            return
        runner(*args, *self.constexpr_values)
        if self.fast:
            self.runners[key] = runner
            self.binaries[key] = compiled

    def checked_binary(self, args):
        """The compiled kernel for `args` (found or compiled by Triton's JIT, not launched),
        with its launcher built and checked to take this kernel's arguments; one that does
        not is compiled again, without the background compile; None where the JIT offers no
        compile without a launch (`warmup`)."""
        warmup = getattr(self.fn, "warmup", None)
        if warmup is None:
            return None
        name = getattr(self.fn, "__name__", self.fn)
        compiled = _resolved(warmup(*args, grid=self.grid, **self.constexprs, **self.options))
        if compiled is None:  # a JIT cache hook took the compile over
            return None
        problem = binary_mismatch(compiled, self.fn)
        if problem is None:
            return compiled
        artifact_logger("perf_hints").info(
            "binary of %s does not take its arguments (%s): compiling it again", name, problem
        )
        # NOTE: compiled again outside the launcher lock: a compile on the background pool
        # must never wait behind a load that waits for this lock.
        _forget_binary(self.fn, compiled)
        compiled = _resolved(warmup(*args, grid=self.grid, **self.constexprs, **self.options))
        problem = "not compiled" if compiled is None else binary_mismatch(compiled, self.fn)
        if problem is not None:
            raise KernelBinaryMismatch(
                f"the compiled Triton kernel {name} does not take the arguments of its source "
                f"({problem}), even compiled again; it was not launched. Clearing Triton's "
                "cache (TRITON_CACHE_DIR) and ember's cache may help."
            )
        return compiled


# NOTE: Triton up to 3.6 builds the launcher of each argument signature as a C extension
# module, and names every one of them `__triton_launcher`. CPython loads a single-phase
# extension it has loaded before (the launcher of a second kernel with the same signature)
# into the one module object that name has in sys.modules, refilling its dict from that
# library's copy, and Triton then reads `mod.launch` from it. Two threads doing this at once
# (a background load beside a first launch) can each read the other's `launch`: a launcher
# for another signature, which raises "function takes exactly N arguments (M given)" or, with
# as many arguments of other types, reads them wrongly. So every launcher ember makes Triton
# build (a compiled kernel's first `.run` / `_init_handles`) is built under this lock.
_LAUNCHER_BUILD = threading.RLock()

# Arguments a pass-through launcher's C entry takes before the kernel's own (see
# _PASS_THROUGH_CALLS): the grid (3), stream, function, the cooperative-grid and PDL flags,
# the two scratch buffers, the packed metadata, the launch metadata and the two launch hooks.
_PASS_THROUGH_FIXED_ARGUMENTS = 13
_ARITY_ERROR = re.compile(r"takes exactly (\d+) arguments? \(0 given\)")


def entry_arity(entry) -> int | None:
    """How many arguments a launcher's C entry takes, read from the error it raises when
    called with none (it parses its arguments before doing anything); None when unknown."""
    if not inspect.isbuiltin(entry):
        return None  # a Python wrapper could act on a call with no arguments
    try:
        entry()
    except TypeError as error:
        match = _ARITY_ERROR.search(str(error))
        return int(match.group(1)) if match else None
    except Exception:  # noqa: BLE001 - another failure says nothing about the arity
        return None
    return None


def binary_mismatch(compiled, fn) -> str | None:
    """Why `compiled` (a kernel Triton compiled) cannot take the arguments of the Triton
    function `fn`, or None: it was compiled from another function, for another number of
    parameters, or its launcher (built here, under the launcher lock) takes another count."""
    params = getattr(fn, "params", None)
    src = getattr(compiled, "src", None)
    source_fn = getattr(src, "fn", None)
    if source_fn is not None and source_fn is not fn:
        return f"compiled from {getattr(source_fn, '__name__', source_fn)}"
    signature = getattr(src, "signature", None)
    if params is not None and signature is not None and len(signature) != len(params):
        return f"compiled for {len(signature)} parameters, the source has {len(params)}"
    with _LAUNCHER_BUILD:
        run = compiled.run  # builds the launcher on first access
    if params is None or not _passes_through(type(run)):
        return None
    arity = entry_arity(getattr(run, "launch", None))
    expected = _PASS_THROUGH_FIXED_ARGUMENTS + len(params)
    if arity is not None and arity != expected:
        return f"its launcher takes {arity} arguments, a launch passes {expected}"
    return None


def _forget_binary(fn, compiled) -> None:
    """Drop `compiled` (or a future of it) from `fn`'s JIT caches, so the next lookup compiles."""
    for caches in list(getattr(fn, "device_caches", {}).values()):
        kernels = caches[0]
        for key, kernel in list(kernels.items()):
            if kernel is compiled or getattr(kernel, "kernel", None) is compiled:
                kernels.pop(key, None)


def _hooks_set() -> bool:
    """Whether a Triton launch hook (a profiler such as proton) wants to see launches."""
    try:
        from triton import knobs
    except ImportError:
        return False
    for name in ("launch_enter_hook", "launch_exit_hook"):
        hook = getattr(knobs.runtime, name, None)
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


# How a launcher's Python `__call__` hands its arguments to the compiled C entry, when
# it does nothing else for a kernel without scratch memory (whitespace removed):
# Triton 3.4 to 3.6, `__call__(gridX, gridY, gridZ, stream, function, *args)`.
_PASS_THROUGH_CALLS = (
    "self.launch(gridX,gridY,gridZ,stream,function,self.launch_cooperative_grid,"
    "self.launch_pdl,global_scratch,profile_scratch,*args)",
)


@functools.cache
def _passes_through(launcher_class) -> bool:
    """Whether `launcher_class.__call__` only allocates scratch memory and calls `self.launch`
    in one of the forms above (read from its source, so another Triton's launcher, which
    may take other arguments, is never called directly)."""
    try:
        text = "".join(inspect.getsource(launcher_class.__call__).split())
    except (OSError, TypeError):
        return False
    return any(form in text for form in _PASS_THROUGH_CALLS)


def binary_entry(run):
    """(C entry, cooperative-grid flag, PDL flag) of a compiled kernel's launcher `run`
    when calling the entry directly does what `run(...)` does, else None."""
    if not _passes_through(type(run)):
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None  # the launcher allocates scratch memory per launch
    try:
        return run.launch, run.launch_cooperative_grid, run.launch_pdl
    except AttributeError:
        return None


def direct_launch(compiled, grid: tuple[int, int, int], constexpr_values: tuple):
    """`launch(stream, *args)` calling a compiled kernel's launcher with nothing in between.

    Triton's own entry (`compiled[grid](*args)`) looks up the current device and
    stream and builds launch metadata on every call; here the grid, the function
    handle and the packed metadata are bound once and the caller passes the stream.
    Where the launcher's Python `__call__` only passes its arguments on
    (`binary_entry`), its C entry is called itself: one Python frame per launch.
    """
    run = compiled.run  # loads the binary onto the device on first access
    function, packed = compiled.function, compiled.packed_metadata
    gx, gy, gz = grid
    entry = binary_entry(run)
    if entry is not None:
        c_launch, coop, pdl = entry

        def launch(stream, *args):
            c_launch(
                gx, gy, gz, stream, function, coop, pdl, None, None, packed, None, None, None,
                *args, *constexpr_values,
            )  # fmt: skip

        return launch
    if constexpr_values:

        def launch(stream, *args):
            run(gx, gy, gz, stream, function, packed, None, None, None, *args, *constexpr_values)

    else:

        def launch(stream, *args):
            run(gx, gy, gz, stream, function, packed, None, None, None, *args)

    return launch


class TritonKernel:
    """A launcher: `kernel(*tensors_and_scalars)` runs the kernel over its whole grid.

    `kernel.launch(stream, *args)` is the wrapper's entry: the caller promises
    that every tensor argument is 16-byte aligned (the wrapper copies a
    misaligned input first) and passes the current CUDA stream. After the first
    call it goes straight to the compiled binary for kernels with static sizes
    and tensor arguments only; other kernels, the interpreter and runs with a
    Triton launch hook set take `kernel(*args)`.
    """

    def __init__(self, fn, source: TritonKernelSource, path: Path, *, autotune: bool, folder: Path):
        self.fn = fn
        self.source = source
        self.path = path
        self.autotune = autotune
        self.folder = folder
        self.config: LaunchConfig | None = None if autotune else default_config(source)
        self.launchers: dict[tuple, Launcher] = {}
        # With static sizes and a fixed configuration every call takes one launcher.
        self.static_launcher: Launcher | None = None
        # Symbolic sizes: xnumel computed per call from the size arguments.
        self.size_positions = [(k, a.name) for k, a in enumerate(source.args) if a.kind == "size"]
        self.xnumel_code = (
            compile(source.xnumel_expr, "<xnumel>", "eval") if source.xnumel_expr else None
        )
        self.launch = self._first_launch
        # _sized_launch's binaries by the sizes' specialization, and direct launches by sizes
        self.sized_binaries: dict[tuple, object] = {}
        self.sized_direct: dict[tuple, Callable[..., None]] = {}
        # checked_launch's direct entries, by the arguments' specialization (None: never)
        self.checked_direct: dict[tuple, Callable[..., None]] | None = {}
        # The background compile and load `precompile` started, waited for at the first call.
        self.precompiled: Future | None = None

    def _first_launch(self, stream, *args) -> None:
        self(*args)
        launcher = self.static_launcher
        if (
            self.size_positions
            and self.config is not None
            and all(a.kind in ("in", "out", "size") for a in self.source.args)
            and FAST_LAUNCH
            and not interpreting()
            and not _hooks_set()
        ):
            self.launch = self._sized_launch
            return
        if (
            launcher is None
            or not launcher.fast
            or any(a.kind not in ("in", "out") for a in self.source.args)
            or _hooks_set()
        ):
            self.launch = self._general_launch
            return
        key = specialization_key(args)
        compiled = launcher.binaries.get(key)
        if compiled is None or not all(key):  # a misaligned argument: the general path
            self.launch = self._general_launch
            return
        self.launch = direct_launch(compiled, launcher.grid, launcher.constexpr_values)

    def _general_launch(self, stream, *args) -> None:
        self(*args)

    def _sized_launch(self, stream, *args) -> None:
        """`launch` of a kernel taking symbolic sizes (a decode step's cache length): the
        binary compiled for the sizes' specialization is called directly, with the grid
        of this call's xnumel; the first call of each specialization takes the checking
        entry, `kernel(*args)`, and keeps the binary it launched."""
        sizes = tuple(args[k] for k, _ in self.size_positions)
        direct = self.sized_direct.get(sizes)
        if direct is None:
            direct = self._sized_direct(sizes, args)
            if direct is None:
                return
        direct(stream, *args)

    def _sized_direct(self, sizes: tuple, args) -> Callable[..., None] | None:
        """The direct launch for these size values, made from the binary of their
        specialization; None after launching through `kernel(*args)` where there is none
        yet (that call compiles or finds it, and keeps it for the next)."""
        config = self.config
        key = tuple(_specialization(size) for size in sizes)
        compiled = self.sized_binaries.get(key)
        xnumel = self._xnumel(config, args)
        if compiled is None:
            self(*args)
            launcher = self.launchers.get((config, xnumel))
            full_key = specialization_key(args)
            aligned = all(
                full_key[k] for k, arg in enumerate(self.source.args) if arg.kind != "size"
            )
            if launcher is not None and launcher.fast and aligned:
                found = launcher.binaries.get(full_key)
                if found is not None:
                    self.sized_binaries[key] = found
            return None
        if len(self.sized_direct) >= SIZED_DIRECT_LIMIT:
            self.sized_direct.clear()
        direct = direct_launch(
            compiled, self._grid(config, xnumel), tuple(config.constexprs().values())
        )
        self.sized_direct[sizes] = direct
        return direct

    def _xnumel(self, config: LaunchConfig, args):
        if self.xnumel_code is None:
            return self.source.xnumel
        sizes = {name: args[k] for k, name in self.size_positions}
        return eval(self.xnumel_code, _XNUMEL_NAMES, sizes)

    def _grid(self, config: LaunchConfig, xnumel: int) -> tuple[int, int, int]:
        per_program = self.source.rows_per_program or config.xblock
        grid = (max(1, -(-xnumel // per_program)) * max(1, self.source.segments), 1, 1)
        if config.yblock:
            grid = (grid[0], max(1, -(-self.source.ynumel // config.yblock)), 1)
        return grid

    def checked_launch(self, stream, *args) -> None:
        """`launch` for a call whose arguments the wrapper cannot vouch for (a fallback's
        result the kernel writes, a constant that may be misaligned): the specialization
        of these arguments is read, and the binary compiled for it is called directly
        when there is one; else the checking entry, `kernel(*args)`."""
        launcher = self.static_launcher
        if launcher is not None and launcher.fast and self.checked_direct is not None:
            key = specialization_key(args)
            direct = self.checked_direct.get(key)
            if direct is None:
                compiled = launcher.binaries.get(key)
                if compiled is not None:
                    if any(a.kind not in ("in", "out") for a in self.source.args) or _hooks_set():
                        self.checked_direct = None  # scalars or a launch hook: never direct
                    else:
                        direct = direct_launch(compiled, launcher.grid, launcher.constexpr_values)
                        self.checked_direct[key] = direct
            if direct is not None:
                direct(stream, *args)
                return
        self(*args)

    def warmup_arguments(self, size_hints: Mapping[str, int] | None = None) -> list | None:
        """What `warmup` compiles for: tensor arguments as their dtypes, size arguments as
        their example values (`size_hints`, by symbol name); None when an argument's value
        is not known before the launch (a scalar input, a size without a hint).

        A size's example value is the one its first launch passes (the graph compiles at
        the call whose sizes gave the hints), so that launch finds the binary Triton
        specialized for it (on the value being 1 or a multiple of 16) ready.
        """
        from inductor_codegen.codegen.triton.ops import TRITON_DTYPES

        torch_dtype = {text: dtype for dtype, text in TRITON_DTYPES.items()}
        hints = size_hints or {}
        mock = []
        for arg in self.source.args:
            if arg.kind == "size" and isinstance(hints.get(arg.name), int):
                mock.append(hints[arg.name])
            elif arg.kind in ("scalar", "size"):
                return None
            else:
                mock.append(torch_dtype[arg.ctype])
        return mock

    def warmup(self, size_hints: Mapping[str, int] | None = None):
        """Compile for the default configuration without launching (`warmup_arguments`);
        the compiled kernel, or a future of it under Triton's async compile mode."""
        mock = self.warmup_arguments(size_hints)
        if mock is None:
            raise ValueError(f"kernel {self.source.name} takes arguments known only at launch")
        config = self.config or default_config(self.source)
        return self.fn.warmup(
            *mock, grid=(1,), **config.constexprs(), num_warps=config.num_warps, **COMPILE_OPTIONS
        )

    def __call__(self, *args) -> None:
        launcher = self.static_launcher
        if launcher is not None:
            launcher(args)
            return
        if self.precompiled is not None:
            self._wait_for_precompile()
        config = self.config or self._tuned(args)
        self._launch(config, args)
        if self.xnumel_code is None and self.config is config:
            self.static_launcher = self.launchers[(config, self.source.xnumel)]

    def _wait_for_precompile(self) -> None:
        """Wait for the compile `precompile` started (a failed one is left to the launch,
        which compiles again and raises the compiler's error where the user sees it)."""
        precompiled, self.precompiled = self.precompiled, None
        try:
            precompiled.result()
        except Exception as error:
            artifact_logger("perf_hints").info(
                "background compile of %s failed, compiling at launch: %s", self.source.name, error
            )

    def _launch(self, config: LaunchConfig, args) -> None:
        xnumel = self._xnumel(config, args)
        key = (config, xnumel)
        launcher = self.launchers.get(key)
        if launcher is None:
            options = {"num_warps": config.num_warps, **COMPILE_OPTIONS}
            launcher = Launcher(self.fn, self._grid(config, xnumel), config.constexprs(), options)
            self.launchers[key] = launcher
        launcher(args)

    # ---------------------------------------------------------- autotuning

    def _tuned(self, args) -> LaunchConfig:
        device = next((a.device for a in args if hasattr(a, "device")), None)
        if device is None or device.type != "cuda" or interpreting():
            self.config = default_config(self.source)  # nothing to measure on
            return self.config
        path = cache_folder("autotune", root=self.folder) / f"{self._cache_key(device)}.json"
        stored = load_record(path)
        if isinstance(stored, dict) and stored.get("schema") == SCHEMA_VERSION:
            try:
                self.config = LaunchConfig(
                    int(stored["xblock"]),
                    tuple(int(r) for r in stored["rblocks"]),
                    int(stored["num_warps"]),
                    int(stored.get("yblock", 0)),
                )
                return self.config
            except (KeyError, TypeError, ValueError) as error:
                discard(path, f"{type(error).__name__}: {error}")
        self.config = self._benchmark(args)
        record = {
            "schema": SCHEMA_VERSION,
            "kernel": self.source.name,
            "xblock": self.config.xblock,
            "rblocks": list(self.config.rblocks),
            "num_warps": self.config.num_warps,
            "yblock": self.config.yblock,
        }
        store_record(path, record)
        return self.config

    def _benchmark(self, args) -> LaunchConfig:
        from triton.testing import do_bench

        log = artifact_logger("perf_hints")
        candidates = autotune_configs(self.source)
        timings = {}
        for k, config in enumerate(candidates):
            try:
                timings[config] = do_bench(lambda c=config: self._launch(c, args), warmup=5, rep=20)
            except Exception as error:  # a configuration that does not compile is skipped
                log.info("autotune %s: %s failed: %s", self.source.name, config.describe(), error)
                continue
            print(
                f"autotune {self.source.name} [{k + 1}/{len(candidates)}] "
                f"{config.describe()}: {timings[config] * 1000:.1f} us",
                file=sys.stderr,
            )
        best = min(timings, key=timings.get)
        log.info("autotune %s: best %s", self.source.name, best.describe())
        return best

    def _cache_key(self, device) -> str:
        import torch
        import triton

        parts = [
            ("schema", str(SCHEMA_VERSION)),
            ("source", self.source.source),
            ("device", torch.cuda.get_device_name(device)),
            ("triton", triton.__version__),
        ]
        digest = hashlib.sha256()
        for name, value in parts:
            digest.update(f"{name}={value}\n".encode())
        return f"{kernel_function_name(self.source)[:40]}_{digest.hexdigest()[:24]}"


def build_launcher(compiled) -> None:
    """Load a compiled kernel onto the current device and build its launcher (a C stub
    compiled once per argument signature), under the launcher lock (`_LAUNCHER_BUILD`)."""
    with _LAUNCHER_BUILD:
        compiled._init_handles()


def _load_binary(compiled, device_index: int) -> None:
    """Load a compiled kernel onto the device and build its launcher, so the first launch
    finds both ready."""
    try:
        with torch.cuda.device(device_index):
            build_launcher(compiled)
    except Exception as error:  # the first launch loads it instead, and reports a real error
        artifact_logger("perf_hints").info("loading a kernel before its launch failed: %s", error)


# Options of every kernel's compile. Kernels with indirect loads are compiled in debug mode
# (`@triton.jit(debug=True)`), so that their bounds checks (`tl.device_assert`) run; the
# overflow checks debug mode would add to every 32-bit integer add and multiply stay off.
COMPILE_OPTIONS = {"sanitize_overflow": False}

_IN_FLIGHT: set[Future] = set()  # background compiles and loads not finished yet
_COMPILE_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}  # (process id, size) -> pool


def compile_pool(workers: int | None = None) -> ThreadPoolExecutor:
    """The process's pool of Triton compile threads (`workers` of them, default the CPU
    count), started at its first use and kept, so that graphs compiled one after the
    other share it and a graph's kernels compile while the next graph is lowered."""
    # NOTE: keyed by the process too: a forked child inherits the pool without its threads.
    key = (os.getpid(), workers or os.cpu_count() or 4)
    pool = _COMPILE_POOLS.get(key)
    if pool is None:
        pool = _COMPILE_POOLS[key] = ThreadPoolExecutor(key[1], "ember-triton-compile")
    return pool


def precompile(
    kernels: list[TritonKernel],
    workers: int | None = None,
    device_index: int | None = None,
    size_hints: Mapping[str, int] | None = None,
) -> None:
    """Start compiling kernels in the background (Triton's async compile mode, on
    `compile_pool`), each then loaded onto the device with its launcher built; return
    at once. A kernel's first launch waits for its own compile and load only, so the
    kernels of the graphs compiled next (a model's other regions, the backward) start
    compiling before this graph's are done.

    Kernels over symbolic sizes compile for the sizes' example values (`size_hints`,
    by symbol name: those of the call the graph is compiled for, which launches them
    first). Kernels with scalar inputs, the interpreter, and Triton versions without
    the async mode compile at their first launch instead.
    """
    if interpreting():
        return
    try:
        from triton.runtime._async_compile import AsyncCompileMode, active_mode
    except ImportError:
        return
    wanted = [k for k in kernels if k.warmup_arguments(size_hints) is not None]
    if not wanted or active_mode.get() is not None:
        return
    log = artifact_logger("perf_hints")
    pool = compile_pool(workers)
    # NOTE: the mode is made active without `with`: its exit waits for every compile,
    # which is what this function must not do. Futures left in it resolve at launch.
    mode = AsyncCompileMode(pool)
    token = active_mode.set(mode)
    try:
        pending = {}
        for kernel in wanted:
            try:
                pending[kernel] = kernel.warmup(size_hints)
            except Exception as error:  # this kernel compiles at its first launch
                log.info("precompile of %s failed: %s", kernel.source.name, error)
    finally:
        active_mode.reset(token)
    # One load per binary (kernels with the same text share it), each after its compile.
    loads: dict[int, Future] = {}
    for kernel, compiled in pending.items():
        load = loads.get(id(compiled))
        if load is None:
            load = loads[id(compiled)] = pool.submit(_finish_compile, compiled, device_index)
            _IN_FLIGHT.add(load)
            load.add_done_callback(_IN_FLIGHT.discard)
        kernel.precompiled = load


def wait_for_background_compiles() -> None:
    """Wait until every compile and load `precompile` started has finished (failed ones
    are left to their launch). A CUDA graph capture needs this first: loading a module
    onto the device from another thread would invalidate the capture."""
    for load in list(_IN_FLIGHT):
        try:
            load.result()
        except Exception:  # noqa: BLE001 - reported by the kernel's own launch
            pass


@functools.cache
def _future_kernel_class() -> type | None:
    try:
        from triton.runtime._async_compile import FutureKernel
    except ImportError:
        return None
    return FutureKernel


_RESOLVE = threading.Lock()


def _resolved(kernel):
    """The compiled kernel behind a future of one (Triton's async compile mode), or `kernel`.

    A future is resolved by one thread at a time (Triton's `FutureKernel.result` is not safe
    to call from two at once: a background load and a first launch may both ask), and its
    compile is waited for before the lock, which a long compile would otherwise hold."""
    future_class = _future_kernel_class()
    if not (future_class and isinstance(kernel, future_class)):
        return kernel
    compile_future = vars(kernel).get("future")  # not getattr: that would resolve it
    if isinstance(compile_future, Future):
        wait([compile_future])
    with _RESOLVE:
        return kernel.result()


def _finish_compile(compiled, device_index: int | None) -> None:
    """Wait for a compile started by `precompile`, then load its binary onto the device."""
    compiled = _resolved(compiled)
    if device_index is not None and hasattr(compiled, "_init_handles"):
        _load_binary(compiled, device_index)
