"""Guard source files: in linecache always, on disk only while the `guards` log is on, under
the private cache root, with guarded string and bytes values elided."""

from __future__ import annotations

import linecache
import os

from guards import GuardSet, set_logs
from guards.guard_codegen import elide_values
from guards.sources import GlobalSource


def test_string_and_bytes_values_are_elided_but_sources_kept():
    source = (
        "# EQUALS_MATCH: G['API_TOKEN'] == 'sekrit'\n"
        "___c = ...  # b'raw-secret'\n"
        'if not (x == \'abc\' and y == b"\\x00q" and L[\'x\']["k"] == "v"):\n'
        "___type = ...  # <class 'torch.Tensor'>\n"
    )
    elided = elide_values(source)
    assert "sekrit" not in elided and "raw-secret" not in elided and "abc" not in elided
    assert "G['API_TOKEN']" in elided and "L['x'][\"k\"]" in elided
    assert "<class 'torch.Tensor'>" in elided
    assert elided.count("\n") == source.count("\n")  # line for line, for tracebacks


def _guards_on_a_secret():
    guards = GuardSet()
    guards.add_equals(GlobalSource("API_TOKEN"), "sekrit-value")
    return guards


def test_no_guard_file_without_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    compiled = _guards_on_a_secret().compile(name="f")
    assert not os.path.exists(compiled.filename)
    assert "".join(linecache.getlines(compiled.filename)) == compiled.source
    assert not (tmp_path / "guards").exists()


def test_guard_file_with_the_log_is_private_and_elided(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    set_logs(guards=True)
    try:
        compiled = _guards_on_a_secret().compile(name="f")
    finally:
        set_logs()
    assert compiled.filename.startswith(str(tmp_path / "guards"))
    text = open(compiled.filename).read()
    assert "sekrit-value" in compiled.source and "sekrit-value" not in text
    assert os.stat(compiled.filename).st_mode & 0o777 == 0o600
    assert "".join(linecache.getlines(compiled.filename)) == compiled.source
