"""Capture records as data (dynamo_capture.portable): values and named objects found again,
and found stale when what they name changed.

Footguns, worst first:
| a changed function found as the old one | another body under the same name -> Stale
| a digest that differs between processes | frozenset constants under other hash seeds -> equal
| an object without a name kept           | a lambda -> NotPortable
"""

from __future__ import annotations

import enum
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dynamo_capture.portable import NotPortable, Stale, decode_value, encode_value


class Color(enum.Enum):
    RED = "red"


def target(x):
    return x in {"a", "b", "c", "d"}


@pytest.mark.parametrize(
    "value",
    [
        None, True, 3, 2.5, float("inf"), "s", b"\x00", (1, (2, 3)), [1, 2], slice(1, None, 2),
        torch.float16, torch.device("cpu"), torch.channels_last, torch.Size([2, 3]),
        Color.RED, torch.ops.aten.add.Tensor, torch.ops.aten.mm, torch.nn.functional.relu,
        torch.conv2d, torch.nn.Linear, torch.nn.functional, target,
    ],
)  # fmt: skip
def test_portable_value_round_trips(value):
    decoded = decode_value(encode_value(value))
    if isinstance(value, float | int | str | bytes | tuple | list | slice | torch.device):
        assert decoded == value and type(decoded) is type(value)
    else:
        assert decoded is value


def test_portable_lambda_is_not_portable():
    with pytest.raises(NotPortable):
        encode_value(lambda x: x)


def test_portable_changed_function_under_same_name_is_stale(monkeypatch):
    encoded = encode_value(target)

    def edited(x):  # another body under the same name
        return x

    edited.__name__ = edited.__qualname__ = "target"
    monkeypatch.setattr(sys.modules[__name__], "target", edited)
    with pytest.raises(Stale):
        decode_value(encoded)


def test_portable_code_digest_is_the_same_under_other_hash_seeds():
    root = Path(__file__).resolve().parents[2]
    code = (
        f"import sys; sys.path[:0] = [{str(root / 'dynamo_capture' / 'src')!r}, "
        f"{str(root / 'guards' / 'src')!r}]\n"
        "from dynamo_capture.portable import code_digest\n"
        "def target(x):\n    return x in {'a', 'b', 'c', 'd'}\n"
        "print(code_digest(target.__code__))\n"
    )
    digests = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        digests.add(done.stdout.strip())
    assert len(digests) == 1


class Holder:
    def method(self):
        return 1


def test_portable_class_edited_in_process_gets_a_new_fingerprint(monkeypatch):
    before = encode_value(Holder)

    def method(self):
        return 2

    monkeypatch.setattr(Holder, "method", method)
    assert encode_value(Holder) != before
    with pytest.raises(Stale):
        decode_value(before)


def test_portable_shape_guard_round_trips_and_checks_the_same():
    import sympy

    from dynamo_capture.portable import decode_guard, encode_guard
    from dynamo_capture.sources import LocalSource
    from guards.shape_env import ShapeEnv, TensorPropertySource

    env = ShapeEnv()
    x, y = LocalSource("x"), LocalSource("y")
    s0 = env.create_symbol(6, TensorPropertySource(x, "size", 0))
    s1 = env.create_symbol(4, TensorPropertySource(x, "size", 1))
    s2 = env.create_symbol(10, TensorPropertySource(y, "size", 0))
    env.record(sympy.Le(s1, s2))
    env.record(sympy.Eq(sympy.Mod(s0, 2), 0))
    guard = env.guard()
    decoded = decode_guard(encode_guard(guard), lambda source: None)
    assert decoded == guard
    for sizes in ((6, 4, 10), (8, 3, 3), (7, 4, 10), (6, 5, 4), (1, 4, 10)):
        values = (*sizes,)
        assert decoded.failure(*values) == guard.failure(*values)
    assert decoded.failure(7, 4, 10) is not None  # s0 % 2 == 0 is still checked


def test_portable_deepcopy_contents_guard_round_trips_and_checks_the_same():
    from dynamo_capture.portable import decode_guard, encode_guard
    from guards import DeepcopyContentsGuard, LocalSource

    config = {"layers": [1, 2.5, None, "a", (1, 2)], "dtype": torch.float16, "act": torch.relu}
    guard = DeepcopyContentsGuard.of(LocalSource("config"), config)
    decoded = decode_guard(encode_guard(guard), None)
    assert decoded == guard and decoded.failure(config) is None
    assert decoded.state.holds(config)
    config["layers"][1] = 3.5
    assert not decoded.state.holds(config) and decoded.failure(config) is not None
    with pytest.raises(NotPortable):  # a range: no portable value (the record is not kept)
        encode_guard(DeepcopyContentsGuard.of(LocalSource("config"), {"r": range(3)}))


def test_portable_id_guard_on_a_bound_method_tells_its_object_apart():
    from dynamo_capture.portable import _identity_fingerprint

    no_grad, enable_grad = torch.no_grad(), torch.enable_grad()
    # a bound method forwards `__dict__` to its function: both once read as one object
    assert _identity_fingerprint(no_grad.clone) != _identity_fingerprint(enable_grad.clone)
    assert _identity_fingerprint(no_grad.clone) == _identity_fingerprint(torch.no_grad().clone)
    assert _identity_fingerprint(no_grad.clone) != _identity_fingerprint(no_grad.__enter__)


@pytest.mark.parametrize(
    "obj",
    [functools.partial(print, 1), type("Listed", (list,), {})(), ValueError("a"), object()],
    ids=["partial", "list subclass", "exception", "object"],
)
def test_portable_id_guard_on_an_object_with_state_outside_its_dict_is_not_portable(obj):
    from dynamo_capture.portable import _identity_fingerprint

    with pytest.raises(NotPortable):
        _identity_fingerprint(obj)


def test_portable_function_made_by_a_grad_mode_decorator_is_fingerprinted_by_its_mode():
    from dynamo_capture.portable import _fingerprint

    def f(x):
        return x.cos()

    assert _fingerprint(torch.no_grad()(f)) != _fingerprint(torch.enable_grad()(f))
    assert _fingerprint(torch.no_grad()(f)) == _fingerprint(torch.no_grad()(f))


def test_module_structure_guard_round_trips_and_reads_its_module_again():
    from dynamo_capture.portable import decode_guard, encode_guard
    from guards import LocalSource, ModuleStructureGuard, NNModuleSource

    source = NNModuleSource(LocalSource("block"), True)
    guard = ModuleStructureGuard.of(source, torch.nn.Linear(2, 2))
    data = encode_guard(guard)
    now = torch.nn.Linear(2, 2)  # another module of the class, read at install
    decoded = decode_guard(data, lambda s: now)
    assert decoded == guard and decoded.ref() is now
    with pytest.raises(Stale):
        decode_guard(data, lambda s: torch.nn.ReLU())
