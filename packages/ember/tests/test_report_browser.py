"""The compile report of a real model, opened in a real browser (headless Chromium).

GPT-2 (a tiny config, random weights) behind a wrapper that prints between the model
and the softmax (a graph break), called with two sequence lengths (a recompile). The
page is loaded from disk with no server; the test reads the DOM after the page's own
scripts ran (the syntax highlighter) and takes a screenshot.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

import ember
from ember import report

BROWSER_FLAGS = [
    "--headless",
    "--disable-gpu",
    "--no-sandbox",  # NOTE: CI containers run as root, where Chromium's sandbox cannot start
    "--no-first-run",
    "--disable-extensions",
    "--allow-file-access-from-files",
]


class _LogitsThenPrint(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        logits = self.model(ids).logits
        print("between the model and the softmax")  # the graph break
        return logits.softmax(-1)


def _gpt2_tiny():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=128, n_positions=64,
        bos_token_id=0, eos_token_id=0, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return _LogitsThenPrint(transformers.GPT2LMHeadModel(config).eval())


def _browser(chromium, *args, timeout=180):
    return subprocess.run(
        [chromium, *BROWSER_FLAGS, *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def gpt2_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2_trace")
    model = _gpt2_tiny()
    compiled = ember.compile(model)
    with ember.trace(folder / "trace"), torch.no_grad():
        for length in (8, 8, 12):  # a hit, then a recompile for the new length
            ids = torch.randint(0, 128, (2, length))
            torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-4, atol=1e-5)
    page = folder / "report.html"
    assert report.main([str(folder / "trace"), "-o", str(page)]) == 0
    return page


def test_report_of_gpt2_in_headless_chromium_shows_compiles_breaks_recompiles_kernels(
    chromium, gpt2_report
):
    result = _browser(chromium, "--dump-dom", gpt2_report.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    # warnings first, then the frame tree with compile ids
    assert dom.index('id="warnings"') < dom.index("<h2>Frames</h2>")
    # the part before the break keeps forward's name (as torch.compile's frame), the one
    # after it is named as torch.compile names its resume function
    assert re.search(r'class="frame">_LogitsThenPrint.forward</span> <a class="cid"', dom)
    assert re.search(r'class="frame">_LogitsThenPrint.torch_dynamo_resume_in_forward_at_\d+<', dom)
    compiled_ids = re.findall(r'forward</span> <a class="cid" href="#c-(\d+)-0">', dom)
    assert any(f'href="#c-{frame}-1"' in dom for frame in compiled_ids)  # two compiles of it
    # where it broke: the user's file and line
    assert "test_report_browser.py:" in dom and "graph break" in dom
    assert "between the model and the softmax" in dom
    # why it recompiled: the guard each cached entry failed, and a diff of the entries
    assert "Recompiled" in dom and "size mismatch" in dom
    assert "Diff against the entry it adds to" in dom and 'class="add"' in dom
    # kernels and AOT graphs, highlighted by the page's own script
    assert "inference kernels" in dom and "AOT inference graph" in dom
    assert 'data-highlighted="1"' in dom and '<span class="kw">extern</span>' in dom
    # stage timings as a chart
    assert "<svg" in dom and re.search(r"<title>lower: [\d.]+ ms</title>", dom)
    # nothing from the network
    assert not re.search(r'(src|href)="(https?:)?//', dom)


def test_report_screenshot_in_headless_chromium(chromium, gpt2_report, tmp_path):
    shot = tmp_path / "report.png"
    result = _browser(
        chromium, f"--screenshot={shot}", "--window-size=1200,900", gpt2_report.as_uri()
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
