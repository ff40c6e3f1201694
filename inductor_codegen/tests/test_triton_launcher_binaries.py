"""A kernel is launched only through a binary and a launcher that take its arguments.

Footguns, worst first:
  silent wrong result  a launcher built for another signature with as many arguments
  crash                "function takes exactly 18 arguments (21 given)" at a first launch
  slowdown             a binary compiled again after a mismatch

Triton up to 3.6 builds each signature's launcher as a C extension module named
`__triton_launcher`; CPython loads one it has loaded before into the single module object
of that name, so two threads building launchers at once can read each other's `launch`.
The first test builds such modules with the C compiler and races them on the CPU; the
others check `Launcher`'s checks with stand-ins for Triton's compiled kernels.
"""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch

from inductor_codegen.codegen.triton import runtime
from inductor_codegen.codegen.triton.runtime import (
    KernelBinaryMismatch,
    Launcher,
    binary_mismatch,
    entry_arity,
)

FIXED = runtime._PASS_THROUGH_FIXED_ARGUMENTS


def _launcher_source(arguments: int) -> str:
    """A C launcher module shaped as Triton's: named `__triton_launcher`, its `launch`
    parsing exactly `arguments` arguments and returning how many it took."""
    names = [f"a{k}" for k in range(arguments)]
    return f"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject* launch(PyObject* self, PyObject* args) {{
  PyObject {", ".join("*" + n for n in names)};
  if (!PyArg_ParseTuple(args, "{"O" * arguments}", {", ".join("&" + n for n in names)}))
    return NULL;
  return PyLong_FromLong({arguments});
}}
static PyMethodDef methods[] = {{{{"launch", launch, METH_VARARGS, ""}}, {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "__triton_launcher", NULL, -1, methods}};
PyMODINIT_FUNC PyInit___triton_launcher(void) {{ return PyModule_Create(&module); }}
"""


@pytest.fixture(scope="module")
def launcher_modules(tmp_path_factory):
    """{parameter count: a function building its launcher module}, each module built (and
    loaded once, so later loads take CPython's path for a module loaded before)."""
    build = pytest.importorskip("triton.runtime.build")
    if not (shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")):
        pytest.skip("no C compiler")
    cache = tmp_path_factory.mktemp("triton_cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("TRITON_CACHE_DIR", str(cache))
    try:
        from triton import knobs

        patch.setattr(knobs.cache, "dir", str(cache), raising=False)
    except (ImportError, AttributeError):
        pass

    def load(params: int):
        return build.compile_module_from_src(_launcher_source(FIXED + params), "__triton_launcher")

    counts = list(range(1, 9))
    try:
        for params in counts:
            load(params)
        yield {params: (lambda p=params: load(p)) for params in counts}
    finally:
        patch.undo()


class PassThroughRun:
    """A launcher shaped as Triton 3.6's CudaLauncher (its `__call__` is read as source)."""

    def __init__(self, launch):
        self.launch = launch
        self.launch_cooperative_grid, self.launch_pdl = False, False

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        global_scratch = profile_scratch = None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, global_scratch, profile_scratch, *args)  # fmt: skip


class Compiled:
    """A compiled kernel of `fn` whose launcher is built at the first `.run`, as Triton's is:
    the module is loaded, then its `launch` read."""

    def __init__(self, fn, build_module, launches=None):
        self.src = SimpleNamespace(fn=fn, signature={p: "*fp32" for p in fn.params})
        self.build_module = build_module
        self.launches = launches if launches is not None else []
        self._run = None

    @property
    def run(self):
        if self._run is None:
            self._init_handles()
        return self._run

    def _init_handles(self):
        if self._run is None:
            module = self.build_module()
            self._run = PassThroughRun(module.launch)

    def __getitem__(self, grid):
        return lambda *args: self.launches.append((self, grid, args))


def _function(params: int, name="kernel"):
    fn = SimpleNamespace(params=[f"p{k}" for k in range(params)], __name__=name)
    fn.device_caches = {0: ({}, {}, None, None, None)}
    return fn


def test_launchers_built_on_several_threads_each_take_their_own_kernels_arguments(
    launcher_modules,
):
    """Background loads (`build_launcher`, as `_load_binary` calls it) beside first launches on the main thread: every
    kernel's launcher takes its own kernel's arguments."""
    kernels = []
    for _ in range(6):
        for params, build_module in launcher_modules.items():
            fn = _function(params)
            kernels.append((fn, Compiled(fn, build_module)))
    background = kernels[::2]
    with ThreadPoolExecutor(8) as pool:
        loads = [pool.submit(runtime.build_launcher, c) for _, c in background]
        problems = [binary_mismatch(c, fn) for fn, c in kernels[1::2]]
        for load in loads:
            load.result()
    problems += [binary_mismatch(c, fn) for fn, c in background]
    assert problems == [None] * len(kernels)
    for fn, compiled in kernels:
        assert entry_arity(compiled.run.launch) == FIXED + len(fn.params)


def test_entry_arity_reads_a_c_entrys_argument_count(launcher_modules):
    assert entry_arity(launcher_modules[3]().launch) == FIXED + 3
    assert entry_arity(lambda *args: None) is None  # a Python wrapper is never probed


def _checked_launcher(fn, binaries):
    """A Launcher of `fn` on a device (its binaries checked), whose JIT compiles `binaries`
    one after the other."""
    compiled_for = iter(binaries)

    def warmup(*args, grid, **kwargs):
        compiled = next(compiled_for)
        fn.device_caches[0][0][("key",)] = compiled
        return compiled

    fn.warmup = warmup
    launcher = Launcher(fn, (4, 1, 1), {"XBLOCK": 64}, {"num_warps": 4})
    launcher.checked = launcher.fast = True
    return launcher


def test_a_binary_whose_launcher_takes_other_arguments_is_compiled_again_not_launched(
    launcher_modules,
):
    fn = _function(3)
    launches = []
    crossed = Compiled(fn, launcher_modules[2], launches)  # a launcher of another signature
    fresh = Compiled(fn, launcher_modules[3], launches)
    launcher = _checked_launcher(fn, [crossed, fresh])
    args = (torch.empty(4), torch.empty(4))
    launcher(args)
    assert [c for c, _, _ in launches] == [fresh]
    assert launches[0][1:] == ((4, 1, 1), (*args, 64))
    assert fn.device_caches[0][0] == {("key",): fresh}  # the crossed binary was forgotten
    assert list(launcher.binaries.values()) == [fresh]


def test_a_binary_compiled_from_another_kernel_is_compiled_again_not_launched(
    launcher_modules,
):
    fn, other = _function(3), _function(2, "other")
    launches = []
    foreign = Compiled(other, launcher_modules[2], launches)
    fresh = Compiled(fn, launcher_modules[3], launches)
    launcher = _checked_launcher(fn, [foreign, fresh])
    launcher((torch.empty(4), torch.empty(4)))
    assert [c for c, _, _ in launches] == [fresh]


def test_a_binary_that_never_matches_raises_and_is_never_launched(launcher_modules):
    fn = _function(3)
    launches = []
    crossed = [Compiled(fn, launcher_modules[5], launches) for _ in range(2)]
    launcher = _checked_launcher(fn, crossed)
    with pytest.raises(KernelBinaryMismatch, match="takes 18 arguments, a launch passes 16"):
        launcher((torch.empty(4), torch.empty(4)))
    assert launches == [] and launcher.binaries == {}


def test_a_future_kernel_resolved_from_several_threads_at_once_resolves_once():
    """A background load and a first launch may both wait for one background compile."""
    async_compile = pytest.importorskip("triton.runtime._async_compile")
    for _ in range(20):
        compile_done, finalized = Future(), []
        try:
            future_kernel = async_compile.FutureKernel(
                finalized.append, lambda f: None, compile_done
            )
        except TypeError:  # a Triton whose FutureKernel takes no cleanup
            future_kernel = async_compile.FutureKernel(finalized.append, compile_done)
        start = threading.Barrier(6)

        def resolve(start=start, future_kernel=future_kernel):
            start.wait()
            return runtime._resolved(future_kernel)

        with ThreadPoolExecutor(6) as pool:
            waiting = [pool.submit(resolve) for _ in range(6)]
            compile_done.set_result("binary")
            assert [w.result() for w in waiting] == ["binary"] * 6
        assert finalized == ["binary"]
