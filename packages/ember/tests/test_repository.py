"""The monorepo's promises: package layout, layering in metadata, README commands, CI script.

Skipped where ember is installed without its repository (e.g. from a wheel).
"""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if not (ROOT / "noxfile.py").is_file():
    pytest.skip("not running inside the ember repository", allow_module_level=True)

PACKAGES = {
    "guards": "guards",
    "dynamo_capture": "dynamo_capture",
    "prim_decomp": "prim_decomp",
    "aot_autograd": "aot_autograd",
    "inductor_codegen": "inductor_codegen",
    "ember": "packages/ember",
}
# What each package may depend on among its siblings (docs/ARCHITECTURE.md, Layers).
ALLOWED = {
    "guards": set(),
    "prim_decomp": set(),
    "dynamo_capture": {"guards"},
    "aot_autograd": {"prim_decomp", "guards"},
    "inductor_codegen": {"prim_decomp", "guards"},
    "ember": {"guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen"},
}


def _distribution(name):
    return "ember" if name == "ember" else "ember-" + name.replace("_", "-")


def _metadata(name):
    return tomllib.loads((ROOT / PACKAGES[name] / "pyproject.toml").read_text())


@pytest.mark.parametrize("name", PACKAGES)
def test_package_layout(name):
    folder = ROOT / PACKAGES[name]
    for part in ("pyproject.toml", "README.md", "CHANGELOG.md", f"src/{name}/__init__.py", "tests"):
        assert (folder / part).exists(), f"{folder / part} is missing"
    assert "__all__" in (folder / "src" / name / "__init__.py").read_text()


@pytest.mark.parametrize("name", PACKAGES)
def test_package_metadata(name):
    meta = _metadata(name)
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    project = meta["project"]
    assert project["name"] == _distribution(name)
    assert re.fullmatch(r"\d+\.\d+\.\d+", project["version"])
    deps = project["dependencies"]
    assert "torch>=2.11" in deps
    siblings = {d.split(">")[0].split("[")[0] for d in deps if d.startswith("ember")}
    allowed = {_distribution(n) for n in ALLOWED[name]}
    assert siblings <= allowed, f"{name} declares {siblings - allowed}, outside its layer"
    assert "test" in project["optional-dependencies"]


def test_layer_specific_dependencies():
    assert any(
        d.startswith("networkx") for d in _metadata("aot_autograd")["project"]["dependencies"]
    )
    assert any(d.startswith("sympy") for d in _metadata("guards")["project"]["dependencies"])
    gpu = _metadata("inductor_codegen")["project"]["optional-dependencies"]["gpu"]
    assert any(d.startswith("triton") for d in gpu)


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_readme_has_exactly_two_commands_demo_and_tests():
    commands = [c.split("#")[0].strip() for c in _readme_commands()]
    assert commands == ["pip install nox && nox -s demo", "pip install nox && nox -s tests"]


def test_ci_runs_the_readme_test_command_and_lint():
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = _readme_commands()[1].split("#")[0].strip()
    assert test_command in ci.splitlines()
    assert "nox -s lint" in ci.splitlines()


def test_readme_python_examples_run():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, flags=re.S)
    assert len(blocks) >= 3
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_noxfile_has_a_session_per_package():
    text = (ROOT / "noxfile.py").read_text()
    for name in PACKAGES:
        assert f'"{name}": "{PACKAGES[name]}"' in text
    for session in ("def tests(", "def lint(", "def demo(", "def bench("):
        assert session in text


def test_every_readme_points_at_the_architecture_document():
    architecture = ROOT / "docs" / "ARCHITECTURE.md"
    assert architecture.is_file()
    for folder in ["", *PACKAGES.values()]:
        readme = (ROOT / folder / "README.md").read_text()
        links = re.findall(r"\(([^)]*ARCHITECTURE\.md)\)", readme)
        if folder:
            assert links, f"{folder}/README.md does not link docs/ARCHITECTURE.md"
        for link in links:
            assert (ROOT / folder / link).resolve() == architecture.resolve(), (folder, link)
        assert "DESIGN.md" not in readme


def test_ci_installs_each_package_alone_and_builds_the_wheels():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'nox -s "tests-$package" -- --collect-only -q' in ci
    assert "nox -s wheels" in ci
    for package in PACKAGES:
        assert package in ci
