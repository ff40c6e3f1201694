"""Sessions for the Ember monorepo.

    nox -s tests                 every package's tests in one environment
    nox -s tests-<package>       one package alone, with only what it declares
    nox -s lint                  ruff and the import-linter layer contracts
    nox -s demo                  the main job: compile a model and run it
    nox -s bench                 benchmarks/ (eager vs ember vs torch.compile)
    nox -s bench_cpu             the CPU model suite at 2 pinned threads (benchmarks/cpu_suite.sh)
    nox -s zoo                   the model zoo: ~55 architectures, inference and a training
                                 step against eager (benchmarks/model_zoo.py; heavy)
    nox -s fuzz                  tools/fuzz/: random programs, each backend against eager
    nox -s opinfo                torch's OpInfo database through ember.compile: every
                                 sample, bfloat16/float16, dynamic=True (one session each)
    nox -s report                compile a small GPT-2 traced; its report page: report.html
    nox -s wheels                hatch-build each wheel; import it with only its siblings
    nox -s compat                the oldest torch supported (2.11, as on the GPU machine):
                                 guards' tests and the dynamic-shape tests of every stage

Which torch the environments get:

    EMBER_TORCH unset            torch==2.13.0 (this project's pinned build)
    EMBER_TORCH="torch==2.11.0"  any pip requirement you name
    EMBER_TORCH=system           no torch is installed: the environment sees the
                                 torch of the Python running nox (site packages)

Environments are reused between runs and packages are installed editable.
Arguments after `--` go to pytest (tests sessions) or to the script.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint"]

# import name -> folder; the order is the layering, lowest first.
PACKAGES = {
    "guards": "guards",
    "prim_decomp": "prim_decomp",
    "dynamo_capture": "dynamo_capture",
    "aot_autograd": "aot_autograd",
    "inductor_codegen": "inductor_codegen",
    "ember": "packages/ember",
}
DISTRIBUTIONS = {
    ("ember" if name == "ember" else "ember-" + name.replace("_", "-")): name for name in PACKAGES
}
TORCH_DEFAULT = "torch==2.13.0"
TEST_TOOLS = ["pytest>=8", "hypothesis>=6", "expecttest>=0.2", "numpy"]


def _torch_requirement() -> str | None:
    """The torch requirement to install, or None to use the system's torch."""
    value = os.environ.get("EMBER_TORCH", "").strip()
    if value == "system":
        return None
    return value or TORCH_DEFAULT


VENV_PARAMS = ["--system-site-packages"] if _torch_requirement() is None else []


def _local_closure(name: str) -> list[str]:
    """`name` and every sibling package it declares, directly or not, test extras included.

    Siblings are installed from the checkout: a sibling named only in a `test` extra
    (aot_autograd's tests capture with dynamo_capture) would otherwise be looked up
    on the package index.
    """
    seen: list[str] = []

    def visit(package: str) -> None:
        if package in seen:
            return
        seen.append(package)
        meta = tomllib.loads((ROOT / PACKAGES[package] / "pyproject.toml").read_text())
        extras = meta["project"].get("optional-dependencies", {})
        for requirement in [*meta["project"]["dependencies"], *extras.get("test", [])]:
            distribution = requirement.split(">")[0].split("=")[0].split("[")[0].strip()
            if distribution in DISTRIBUTIONS:
                visit(DISTRIBUTIONS[distribution])

    visit(name)
    return seen


def _install(session: nox.Session, packages: list[str], *extra: str) -> None:
    """One pip resolve: torch, the packages editable (with their test extra), and `extra`."""
    args = []
    torch = _torch_requirement()
    if torch is not None:
        args.append(torch)
    for package in packages:
        args += ["-e", f"{PACKAGES[package]}[test]"]
    session.install(*args, *extra)


def _pytest(session: nox.Session, paths: list[str]) -> None:
    # Exit code 5 means "no tests collected": not a failure of the code under test.
    session.run("pytest", *paths, *session.posargs, success_codes=[0, 5])


@nox.session(venv_params=VENV_PARAMS)
def tests(session: nox.Session) -> None:
    """Every package's tests, in one environment holding all packages.

    pytest runs once per package, from the package's folder (its own rootdir and
    settings, as when a maintainer runs one package alone); the last line sums
    them up: "tests: N passed, N failed, N skipped".
    """
    _install(session, list(PACKAGES))
    reports = Path(session.create_tmp()).resolve()
    failed = []
    for name, folder in PACKAGES.items():
        if not (ROOT / folder / "tests").is_dir():
            session.warn(f"{folder} has no tests folder")
            continue
        session.chdir(ROOT / folder)
        report = reports / f"{name}.xml"
        # Exit code 1 (some tests failed) is collected and reported after all packages ran;
        # 5 means "no tests collected"; anything else (usage or internal error) stops here.
        session.run(
            "pytest", "tests", f"--junitxml={report}", *session.posargs, success_codes=[0, 1, 5]
        )
        session.chdir(ROOT)
        if report.exists() and _junit_totals([report])["failed"]:
            failed.append(name)
    totals = _junit_totals(sorted(reports.glob("*.xml")))
    print(
        f"tests: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped"
    )
    if failed:
        session.error(f"tests failed in: {', '.join(failed)}")


def _junit_totals(reports: list[Path]) -> dict[str, int]:
    """Sum pytest's junit XML reports into passed / failed / skipped counts."""
    import xml.etree.ElementTree as ElementTree

    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for report in reports:
        for suite in ElementTree.parse(report).getroot().iter("testsuite"):
            tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
            failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            totals["passed"] += tests - skipped - failed
            totals["failed"] += failed
            totals["skipped"] += skipped
    return totals


# `nox -s tests-guards` and friends: one plainly named session per package.
for _name in PACKAGES:

    def _make(package: str):
        def session_fn(session: nox.Session) -> None:
            _install(session, _local_closure(package))
            session.chdir(PACKAGES[package])
            _pytest(session, ["tests"])

        session_fn.__doc__ = f"The {package} package's tests, installed alone."
        return session_fn

    nox.session(name=f"tests-{_name}", venv_params=VENV_PARAMS)(_make(_name))


# The oldest torch the packages support, and the tests that read torch's behaviour most
# (symbolic sizes and guards; FX and SymInt APIs differ between releases).
TORCH_OLDEST = "torch==2.11.0"
COMPAT_TESTS = {
    "guards": ["tests"],
    "dynamo_capture": [
        "tests/test_dynamic.py",
        "tests/test_dynamic_numbers.py",
        "tests/test_automatic_dynamic_numbers.py",
        "tests/test_symbolic_indexing.py",
        "tests/test_corpus_recompiles.py",
    ],
    "aot_autograd": ["tests/test_dynamic_shapes.py", "tests/test_symbolic_float_inputs.py"],
    "inductor_codegen": [
        "tests/test_dynamic_codegen.py",
        "tests/test_dynamic_indexing.py",
        # Triton 3.6's interpreter (torch 2.11's Triton) fails on this kernel's size
        # arguments on the CPU ("only 0-dimensional arrays can be converted to Python
        # scalars"); compiled for a GPU under torch 2.11 it passes.
        "--deselect",
        "tests/test_dynamic_codegen.py::test_triton_kernels_take_size_arguments_and_grids_follow_them",
    ],
    "ember": [
        "tests/test_dynamic_end_to_end.py",
        "tests/test_dynamic_capture_floats.py",
        "tests/test_serving_generate.py",
    ],
}


@nox.session
def compat(session: nox.Session) -> None:
    """COMPAT_TESTS under the oldest supported torch (TORCH_OLDEST).

    Skips, saying so, where that torch cannot be installed (no package index reachable).
    """
    import nox.command

    try:
        session.install(TORCH_OLDEST)
    except nox.command.CommandFailed:
        session.skip(f"{TORCH_OLDEST} could not be installed here")
    session.install(*[a for p in PACKAGES for a in ("-e", f"{PACKAGES[p]}[test]")], "transformers")
    failed = []
    for name, paths in COMPAT_TESTS.items():
        session.chdir(ROOT / PACKAGES[name])
        try:
            session.run("pytest", *paths, "-q", *session.posargs, success_codes=[0, 5])
        except nox.command.CommandFailed:
            failed.append(name)
        session.chdir(ROOT)
    if failed:
        session.error(f"{TORCH_OLDEST}: tests failed in {', '.join(failed)}")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, then import-linter: the layers of docs/ARCHITECTURE.md and no torch compiler stack."""
    session.install("ruff>=0.6", "import-linter>=2.1")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # import-linter finds the packages through their src folders; nothing is imported.
    src = [str(ROOT / folder / "src") for folder in PACKAGES.values()]
    pythonpath = os.pathsep.join([str(ROOT / "tools" / "lint"), *src])
    session.run("lint-imports", env={"PYTHONPATH": pythonpath})


@nox.session(venv_params=VENV_PARAMS)
def demo(session: nox.Session) -> None:
    """The main job: compile a small model with ember and run it."""
    _install(session, list(PACKAGES))
    session.run("python", "-m", "ember.demo", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def bench(session: nox.Session) -> None:
    """benchmarks/: eager vs ember vs torch.compile, each script in one run."""
    _install(session, list(PACKAGES), "transformers")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def bench_cpu(session: nox.Session) -> None:
    """The CPU model suite, eager vs ember vs torch.compile at two pinned threads.

    nox -s bench_cpu -- gpt2 bert      (model names; EMBER_BENCH_* as in model_bench.py)
    """
    _install(session, list(PACKAGES), "transformers")
    session.run(
        "bash", "benchmarks/cpu_suite.sh", *session.posargs, env={"PYTHON": "python"}, external=True
    )


# The torchvision release built against each torch the sessions install.
TORCHVISION_FOR = {"torch==2.13.0": "torchvision==0.28.0", "torch==2.11.0": "torchvision==0.26.0"}


@nox.session(venv_params=VENV_PARAMS)
def zoo(session: nox.Session) -> None:
    """The model zoo (benchmarks/zoo_models.py) through ember.compile against eager.

    nox -s zoo                          every model: transformers', then torchvision's
    nox -s zoo -- gpt2 swin --timeout 120
    Not part of `tests`: it compiles ~55 models. torchvision is installed without its
    dependencies (its model code is what the zoo runs); EMBER_ZOO_TORCHVISION names a
    folder holding it instead.
    """
    import nox.command

    _install(session, list(PACKAGES), "transformers")
    if not os.environ.get("EMBER_ZOO_TORCHVISION"):
        torchvision = TORCHVISION_FOR.get(_torch_requirement() or "", "torchvision")
        try:
            session.install("--no-deps", torchvision, "pillow")
        except nox.command.CommandFailed:  # the transformers models still run
            session.warn(f"{torchvision} could not be installed: its models are skipped")
    session.run("python", "benchmarks/model_zoo.py", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def fuzz(session: nox.Session) -> None:
    """tools/fuzz/: random programs under ember's backends against eager (tools/fuzz/README.md).

    nox -s fuzz -- --seconds 300 --seed 0 --backend inductor
    """
    _install(session, list(PACKAGES))
    session.run("python", "tools/fuzz/fuzz.py", *session.posargs)


OPINFO_SWEEPS = {
    "samples": {"EMBER_OPINFO_SAMPLES": "all"},
    "low_precision": {"EMBER_OPINFO_DTYPES": "bfloat16,float16"},
    "dynamic": {"EMBER_OPINFO_DYNAMIC": "1"},
}


@nox.session(venv_params=VENV_PARAMS)
@nox.parametrize("sweep", list(OPINFO_SWEEPS))
def opinfo(session: nox.Session, sweep: str) -> None:
    """torch's whole OpInfo database through ember.compile (hours on a small CPU).

    nox -s "opinfo(sweep='low_precision')" -- -k "test_forward_through and sum"
    (every sample of each op; bfloat16 and float16; or dynamic=True: see
    packages/ember/tests/test_end_to_end_opinfo.py)
    """
    _install(session, list(PACKAGES))
    session.chdir(ROOT / PACKAGES["ember"])
    env = {"EMBER_FULL_OPINFO": "1", **OPINFO_SWEEPS[sweep]}
    session.run("pytest", "tests/test_end_to_end_opinfo.py", "-rfEX", *session.posargs, env=env)


@nox.session(venv_params=VENV_PARAMS)
def report(session: nox.Session) -> None:
    """The compile report example: trace a GPT-2 compile, render it (`-- <folder> <page>`)."""
    _install(session, list(PACKAGES), "transformers")
    args = list(session.posargs)
    folder = args[0] if args else "ember_trace"
    page = args[1] if len(args) > 1 else "report.html"
    session.run("python", "packages/ember/examples/trace_gpt2.py", folder)
    session.run("python", "-m", "ember.report", folder, "-o", page)


@nox.session(venv_params=VENV_PARAMS)
def wheels(session: nox.Session) -> None:
    """Build every package's wheel with hatch and import each with only its declared siblings."""
    torch = _torch_requirement()
    session.install("hatch", "numpy", "sympy>=1.13", "networkx>=3.0", *([torch] if torch else []))
    dist = Path(session.create_tmp()).resolve() / "dist"
    for folder in PACKAGES.values():
        session.chdir(ROOT / folder)
        session.run("hatch", "build", "-t", "wheel", str(dist), silent=True)
        session.chdir(ROOT)
    for name in PACKAGES:
        target = Path(session.create_tmp()).resolve() / f"site-{name}"
        wheels = [str(next(dist.glob(f"{DIST_FILE[p]}-*.whl"))) for p in _local_closure(name)]
        session.run("pip", "install", "--no-deps", "--target", str(target), *wheels, silent=True)
        code = f"import {name}; print({name}.__name__, {name}.__version__, len({name}.__all__))"
        session.run("python", "-c", code, env={"PYTHONPATH": str(target)})


# wheel file name prefix of each package (hatch normalizes '-' to '_').
DIST_FILE = {name: dist.replace("-", "_") for dist, name in DISTRIBUTIONS.items()}
