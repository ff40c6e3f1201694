"""How many NumPy probes ember captures like torch.compile, and how many give eager's values.

    python dynamo_capture/benchmarks/numpy_probes_report.py

The probes are the programs of tests/test_corpus_numpy_more.py (LIKE_TORCH and
LIKE_EAGER), each run twice on fresh arguments under eager, ember and torch.compile with
counting backends. "like torch": ember's values equal eager's and its graphs and ops
equal torch.compile's (`torchcheck.check_like_torch`); "eager's values": ember's values
equal eager's whatever the counts. Probes where torch.compile's own values differ from
eager's count in the second column only.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import warnings

import pytest

HERE = pathlib.Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"


def _corpus():
    sys.path.insert(0, str(TESTS))
    spec = importlib.util.spec_from_file_location("numpy_more", TESTS / "test_corpus_numpy_more.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    warnings.filterwarnings("ignore")
    corpus = _corpus()
    from torchcheck import check_like_torch

    from dynamo_capture.testing import assert_same, clone_inputs

    like_torch = eager_values = 0
    probes = corpus.LIKE_TORCH + corpus.LIKE_EAGER
    for fn, makers, _ in probes:
        make = corpus._args(*makers)
        try:
            check_like_torch(fn, make)
            like_torch += 1
        except (AssertionError, pytest.skip.Exception) as error:
            print(f"differs from torch.compile: {fn.__name__}: {str(error)[:160]!r}")
        try:
            compiled = corpus.dynamo_capture.optimize(fn, backend=corpus.CountingBackend())
            for _ in range(2):
                args = make()
                assert_same(compiled(*clone_inputs(args)), fn(*clone_inputs(args)))
            eager_values += 1
        except Exception as error:  # noqa: BLE001 - reported
            print(f"wrong value or error: {fn.__name__}: {str(error)[:160]!r}")
    print(f"{len(probes)} probes: {like_torch} like torch.compile, {eager_values} eager's values")


if __name__ == "__main__":
    main()
