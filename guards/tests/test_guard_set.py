"""Each guard kind passes and fails as it should, in the generated function and in words."""

from __future__ import annotations

import dataclasses
import linecache
import logging
import traceback

import pytest
import torch
from guardcheck import check_both

from guards import (
    AttrSource,
    DictKeysGuard,
    EqualsGuard,
    GlobalSource,
    GlobalStateGuard,
    GuardsError,
    GuardSet,
    ItemSource,
    LocalSource,
    ModuleSource,
    NNModuleSource,
    NotInInstanceDictGuard,
    ParamBufferSource,
    Source,
    TensorMatchGuard,
    set_logs,
)

X = LocalSource("x")
_both = check_both


def test_tensor_size_mismatch_message():
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(8, 16))
    assert _both(guards, {"x": torch.randn(8, 16)}) == (True, None)
    ok, why = _both(guards, {"x": torch.randn(16, 16)})
    assert not ok and why == "tensor 'x' size mismatch at index 0: expected 8, actual 16"


@pytest.mark.parametrize(
    ("other", "words"),
    [
        (torch.randn(8, 16, dtype=torch.float64), "dtype mismatch"),
        (torch.randn(8, 16, requires_grad=True), "requires_grad mismatch"),
        (torch.randn(16, 8).t(), "stride mismatch"),
        (torch.randn(8, 16, 1), "number of dimensions"),
        (torch.nn.Parameter(torch.randn(8, 16)), "type mismatch"),
        ([1, 2], "type mismatch"),
    ],
)
def test_tensor_match_fails(other, words):
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(8, 16))
    ok, why = _both(guards, {"x": other})
    assert not ok and words in why


def test_tensor_flags_and_size_one_strides():
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(4, 1, 3))
    # strides at a size-1 dimension do not matter for indexing
    odd = torch.empty_strided((4, 1, 3), (3, 99, 1))
    assert _both(guards, {"x": odd}) == (True, None)
    with torch.inference_mode():
        inference = torch.randn(4, 1, 3)
    ok, why = _both(guards, {"x": inference})
    assert not ok and "inference" in why
    complex_guards = GuardSet()
    complex_guards.add_tensor(X, torch.randn(3, dtype=torch.complex64))
    ok, why = _both(complex_guards, {"x": torch.randn(3, dtype=torch.complex64).conj()})
    assert not ok and "conjugate" in why


def test_dynamic_dims_are_left_unchecked():
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(8, 16), dynamic_dims=(0,))
    assert _both(guards, {"x": torch.randn(3, 16)}) == (True, None)
    assert not _both(guards, {"x": torch.randn(3, 15)})[0]


def test_fake_tensor_guard_stands_for_its_real_class():
    from guards import FakeTensorMode

    mode = FakeTensorMode()
    param = torch.nn.Parameter(torch.randn(2, 2))
    guard = TensorMatchGuard.of(X, mode.from_real(param))
    assert guard.tensor_type is torch.nn.Parameter and guard.requires_grad


def test_type_guard():
    guards = GuardSet()
    guards.add_type(X, 3)
    assert _both(guards, {"x": 4}) == (True, None)
    ok, why = _both(guards, {"x": True})
    assert not ok and why == "'x' type mismatch: expected int, actual bool"


@pytest.mark.parametrize("name", ["__class__", "class", "None", "1x", "lambda_"])
def test_guard_on_a_local_named_like_a_keyword_compiles(name):
    guards = GuardSet()
    guards.add_type(LocalSource(name), 3)
    assert _both(guards, {name: 4}) == (True, None)
    assert not _both(guards, {name: "4"})[0]


@pytest.mark.parametrize(
    ("value", "same", "different"),
    [
        (None, None, 0),
        (True, True, 1),
        (3, 3, 3.0),
        (2.5, 2.5, 2.25),
        (float("nan"), float("nan"), 1.0),
        (float("inf"), float("inf"), 1e308),
        ("mean", "mean", "sum"),
        (torch.float16, torch.float16, torch.bfloat16),
        (torch.device("cpu"), torch.device("cpu"), torch.device("meta")),
        (torch.channels_last, torch.channels_last, torch.contiguous_format),
        (torch.strided, torch.strided, torch.sparse_coo),
        (torch.Size([2, 3]), torch.Size([2, 3]), (2, 3)),
        ((1, 2.0, "a"), (1, 2.0, "a"), (1, 2, "a")),
        ((1, (True, 2)), (1, (True, 2)), (1, (1, 2))),
    ],
)
def test_equals_guard(value, same, different):
    guards = GuardSet()
    guards.add_equals(X, value)
    assert _both(guards, {"x": same}) == (True, None)
    ok, why = _both(guards, {"x": different})
    assert not ok and ("mismatch" in why)


def test_equals_guard_takes_the_seen_object_at_once_and_checks_others_fully():
    stride = (1, 1)
    guards = GuardSet()
    guards.add_equals(X, stride)
    assert "x is ___seen" in guards.compile().source
    assert _both(guards, {"x": stride}) == (True, None)
    assert _both(guards, {"x": tuple([1, 1])}) == (True, None)  # equal, another object
    assert not _both(guards, {"x": (True, True)})[0]  # equal under ==, other item types
    assert not _both(guards, {"x": (1, 2)})[0]
    momentum = 0.1
    guards = GuardSet()
    guards.add_equals(X, momentum)
    assert _both(guards, {"x": float("0.1")}) == (True, None)
    assert not _both(guards, {"x": 0.2})[0]


def test_equals_guard_rejects_other_objects():
    with pytest.raises(GuardsError, match="EqualsGuard supports"):
        EqualsGuard(X, [1, 2])


def test_id_guard_and_weak_liveness():
    class Thing:
        pass

    thing = Thing()
    guards = GuardSet()
    guards.add_id(X, thing)
    assert _both(guards, {"x": thing}) == (True, None)
    ok, why = _both(guards, {"x": Thing()})
    assert not ok and "not the same object" in why
    compiled = guards.compile()
    del thing
    import gc

    gc.collect()
    assert not compiled({"x": Thing()}, {})
    assert "is gone" in compiled.why_failed({"x": Thing()}, {})


def test_id_guard_on_objects_without_weakrefs():
    guards = GuardSet()
    guards.add_id(X, torch.add)
    assert _both(guards, {"x": torch.add}) == (True, None)
    assert not _both(guards, {"x": torch.sub})[0]


def test_length_and_dict_keys():
    guards = GuardSet()
    guards.add_length(LocalSource("xs"), [1, 2, 3])
    guards.add_dict_keys(LocalSource("d"), {"a": 1, "b": 2})
    good = {"xs": [4, 5, 6], "d": {"a": 0, "b": 0}}
    assert _both(guards, good) == (True, None)
    ok, why = _both(guards, dict(good, xs=[1, 2]))
    assert not ok and why == "length of 'xs' mismatch: expected 3, actual 2"
    ok, why = _both(guards, dict(good, d={"b": 0, "a": 0}))
    assert not ok and "keys mismatch" in why
    ok, why = _both(guards, dict(good, xs=(1, 2, 3)))
    assert not ok and "type mismatch" in why


def test_set_items_guard_checks_type_items_and_order():
    guards = GuardSet()
    guards.add_set_items(LocalSource("s"), {1, 2, "a"})
    guards.add_set_items(LocalSource("f"), frozenset({(1, 2), 3.5}))
    good = {"s": {1, 2, "a"}, "f": frozenset({(1, 2), 3.5})}
    assert _both(guards, good) == (True, None)
    for bad in (
        {"s": {1, 2}},
        {"s": {1, 2, "b"}},
        {"s": {1.0, 2, "a"}},  # equal, but an item of another type
        {"s": frozenset({1, 2, "a"})},
        {"f": {3.5, (1, 2)}},
        {"f": frozenset({3.5, (1, 2.0)})},
    ):
        ok, why = _both(guards, dict(good, **bad))
        assert not ok and "mismatch" in why
    # equal sets whose items iterate in another order (a hash collision, inserted the
    # other way round): iteration folded at compile time would differ, so they fail
    first, second = {1, 9}, {9, 1}
    assert first == second and list(first) != list(second)
    guards = GuardSet()
    guards.add_set_items(LocalSource("s"), first)
    assert _both(guards, {"s": {1, 9}}) == (True, None)
    assert not _both(guards, {"s": second})[0]


def test_set_items_guard_compares_other_objects_by_identity():
    first, second = torch.nn.ReLU(), torch.nn.ReLU()
    guards = GuardSet()
    guards.add_set_items(LocalSource("s"), {first, int})
    seen = {first, int}
    assert _both(guards, {"s": seen}) == (True, None)
    ok, why = _both(guards, {"s": {second, int}})
    assert not ok and "items mismatch" in why
    assert not _both(guards, {"s": {first, float}})[0]


def test_nn_module_guard_without_training_flag_leaves_it_to_a_guard_on_its_read():
    model = torch.nn.Dropout()
    source = NNModuleSource(LocalSource("m"))
    unread = GuardSet()
    unread.add_nn_module(source, model, training=False)
    read = GuardSet()
    read.add_nn_module(source, model, training=False)
    read.add_equals(AttrSource(source, "training"), True)
    assert "implied by others" not in read.compile().source
    model.eval()
    assert _both(unread, {"m": model}) == (True, None)
    ok, why = _both(read, {"m": model})
    assert not ok and "training" in why
    assert not _both(unread, {"m": torch.nn.Dropout()})[0]


def test_nn_module_guard():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    source = NNModuleSource(LocalSource("self"))
    guards = GuardSet()
    guards.add_nn_module(source, model)
    linear = ModuleSource(source, "0", builtin=True)
    guards.add_tensor(ParamBufferSource(linear, "weight"), model[0].weight)
    assert _both(guards, {"self": model}) == (True, None)
    model.eval()
    ok, why = _both(guards, {"self": model})
    assert not ok and why == "module 'self' training flag mismatch: expected True, actual False"
    model.train()
    ok, why = _both(guards, {"self": torch.nn.Sequential(torch.nn.Linear(2, 2))})
    assert not ok and "not the same nn.Module" in why
    model[0].weight = torch.nn.Parameter(torch.randn(3, 2))
    ok, why = _both(guards, {"self": model})
    assert not ok and "self.0.weight" in why


def test_global_state_guard():
    guards = GuardSet()
    guards.add_global_state()
    assert _both(guards, {}) == (True, None)
    with torch.no_grad():
        ok, why = _both(guards, {})
    assert not ok and "grad enabled" in why
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ok, why = _both(guards, {})
    assert not ok and "autocast" in why
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ok, why = _both(guards, {})
    finally:
        torch.set_default_dtype(previous)
    assert not ok and "default dtype" in why
    torch.use_deterministic_algorithms(True)
    try:
        ok, why = _both(guards, {})
    finally:
        torch.use_deterministic_algorithms(False)
    assert not ok and "deterministic" in why
    with torch.inference_mode():
        assert not _both(guards, {})[0]


def test_global_state_under_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        guard = GlobalStateGuard.current()
        guards = GuardSet([guard])
        assert _both(guards, {}) == (True, None)
    assert not _both(guards, {})[0]


class _PassingMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _OtherMode(_PassingMode):
    pass


def test_global_state_checks_torch_function_modes_and_state():
    with _PassingMode():
        guards = GuardSet([GlobalStateGuard.current()])
        assert _both(guards, {}) == (True, None)
        with _OtherMode():
            ok, why = _both(guards, {})
            assert not ok and "torch function modes" in why
        with torch._C.DisableTorchFunctionSubclass():
            ok, why = _both(guards, {})
            assert not ok and "torch function state" in why
    ok, why = _both(guards, {})
    assert not ok and "torch function modes" in why


def test_no_aliasing_guard():
    guards = GuardSet()
    guards.add_no_aliasing([LocalSource("a"), LocalSource("b"), GlobalSource("W")])
    base = torch.randn(4)
    W = torch.randn(2)  # noqa: N806
    assert _both(guards, {"a": torch.randn(2), "b": torch.randn(2)}, {"W": W}) == (True, None)
    ok, why = _both(guards, {"a": base[:2], "b": base[2:]}, {"W": W})
    assert not ok and why.startswith("tensors 'a' and 'b' share storage")
    assert guards.add_no_aliasing([LocalSource("a")]) is None


def test_missing_values_fail_instead_of_raising():
    guards = GuardSet()
    guards.add_equals(ItemSource(LocalSource("xs"), 5), 1)
    ok, why = _both(guards, {"xs": [1]})
    assert not ok and "could not be read (IndexError" in why
    ok, why = _both(guards, {})
    assert not ok and "KeyError" in why


def test_dedup_and_order():
    guards = GuardSet()
    x = torch.randn(2)
    guards.add_global_state()
    guards.add_tensor(X, x)
    guards.add_tensor(X, x)
    guards.add_equals(LocalSource("n"), 1)
    assert len(guards) == 3
    kinds = [g.guard_type for g in guards.ordered()]
    assert kinds == ["EQUALS_MATCH", "TENSOR_MATCH", "GLOBAL_STATE"]
    assert DictKeysGuard(X, ("a",)) == DictKeysGuard(X, ("a",))


def test_generated_source_is_logged_and_in_linecache(caplog):
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(2, 3))
    set_logs(guards=True)
    try:
        logger = logging.getLogger("ember.guards")
        logger.addHandler(caplog.handler)
        compiled = guards.compile(name="f")
        logger.removeHandler(caplog.handler)
    finally:
        set_logs()
    assert "def guard_check(L, G" in caplog.text and "x.shape == (2, 3)" in caplog.text
    assert compiled.source in caplog.text
    lines = linecache.getlines(compiled.filename)
    assert "".join(lines) == compiled.source
    with open(compiled.filename) as handle:
        assert handle.read() == compiled.source
    # a traceback through the generated code shows its lines
    guards_raise = GuardSet()
    guards_raise.add_tensor(X, torch.randn(2))
    check = guards_raise.compile().check
    stack = []

    class Spy:
        @property
        def shape(self):
            stack.extend(traceback.format_stack())
            return (2,)

    check({"x": Spy()}, {})
    assert not stack or any("guard_check" in frame for frame in stack)


def test_local_names_never_shadow_builtins():
    guards = GuardSet()
    guards.add_tensor(LocalSource("type"), torch.randn(2))
    guards.add_length(LocalSource("len"), [1])
    guards.add_equals(LocalSource("tuple"), (1, 2))
    L = {"type": torch.randn(2), "len": [3], "tuple": (1, 2)}  # noqa: N806
    assert _both(guards, L) == (True, None)


def test_trusted_parameter_still_notices_data_replaced_in_place():
    param = torch.nn.Parameter(torch.randn(4, 4))
    guards = GuardSet()
    guard = guards.add_tensor(X, param)
    assert guard.trust_identity
    assert _both(guards, {"x": param}) == (True, None)
    with torch.no_grad():
        param.data = torch.randn(2, 2)  # the same object, another shape
    ok, why = _both(guards, {"x": param})
    assert not ok and "size mismatch" in why
    param.data = torch.randn(4, 4).t()  # the same object, another layout
    ok, why = _both(guards, {"x": param})
    assert not ok and "stride mismatch" in why
    param.data = torch.randn(4, 4)
    assert _both(guards, {"x": param}) == (True, None)
    with torch.no_grad():
        param.t_()  # in place: a square parameter transposed
    assert not _both(guards, {"x": param})[0]
    other = torch.nn.Parameter(torch.randn(2, 2))
    ok, why = _both(guards, {"x": other})
    assert not ok and "size mismatch" in why
    assert _both(guards, {"x": torch.nn.Parameter(torch.randn(4, 4))}) == (True, None)


def test_identity_trust_can_be_turned_off():
    param = torch.nn.Parameter(torch.randn(4, 4))
    guards = GuardSet()
    assert not guards.add_tensor(X, param, trust_identity=False).trust_identity
    with torch.no_grad():
        param.data = torch.randn(2, 2)
    ok, why = _both(guards, {"x": param})
    assert not ok and "size mismatch" in why
    plain = GuardSet()
    assert not plain.add_tensor(X, torch.randn(2)).trust_identity


def test_failures_lists_every_failing_guard():
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(8, 16))
    guards.add_equals(LocalSource("n"), 3)
    compiled = guards.compile()
    assert compiled.failures({"x": torch.randn(8, 16), "n": 3}, {}) == []
    failures = compiled.failures({"x": torch.randn(4, 16), "n": 4}, {})
    assert failures == [
        "'n' value mismatch: expected 3, actual 4",
        "tensor 'x' size mismatch at index 0: expected 8, actual 4",
    ]
    assert compiled.why_failed({"x": torch.randn(4, 16), "n": 4}, {}) == failures[0]


def test_trusted_parameters_still_notice_dtype_changes():
    model = torch.nn.Linear(3, 3)
    source = ParamBufferSource(NNModuleSource(LocalSource("self")), "weight")
    guards = GuardSet()
    assert guards.add_tensor(source, model.weight).trust_identity
    assert _both(guards, {"self": model}) == (True, None)
    model.double()  # keeps the Parameter objects, changes their dtype
    assert model._parameters["weight"] is guards.ordered()[0].value
    ok, why = _both(guards, {"self": model})
    assert not ok and "dtype mismatch" in why


def test_held_object_guards_check_classes_modules_and_namespaces():
    import types

    from guards import AttributeIdGuard, MappingItemGuard, NameAbsentGuard, NotInInstanceDictGuard

    class Owner:
        limit = 3

        def method(self):
            return 1

        @classmethod
        def build(cls):
            return cls()

    namespace = {"__name__": "user_module"}
    module = types.ModuleType("holder")
    module.helper = len
    env = {"FLAG": "1"}
    instance = Owner()

    def snapshot():
        return GuardSet(
            [
                AttributeIdGuard.of(Owner, "method", Owner.__dict__["method"]),
                AttributeIdGuard.of(Owner, "limit", Owner.limit),
                AttributeIdGuard.of(Owner, "build", Owner.__dict__["build"].__func__, bound=True),
                AttributeIdGuard.of(module, "helper", module.helper),
                NameAbsentGuard.of(namespace, "abs"),
                NotInInstanceDictGuard(X, "method"),
                MappingItemGuard.of(env, "env", "FLAG"),
            ]
        )

    changes = [
        (lambda: setattr(Owner, "method", lambda self: 2), "Owner.method is not the same"),
        (lambda: setattr(Owner, "limit", 4), "Owner.limit is not the same"),
        (lambda: setattr(Owner, "build", classmethod(lambda cls: 0)), "Owner.build"),
        (lambda: setattr(module, "helper", max), "module holder.helper"),
        (lambda: namespace.__setitem__("abs", max), "'abs' is defined in the globals"),
        (lambda: env.__setitem__("FLAG", "0"), "value of env['FLAG'] changed"),
        (lambda: setattr(instance, "method", print), "its own attribute 'method'"),
    ]
    for change, words in changes:
        guards = snapshot()
        assert _both(guards, {"x": instance}) == (True, None)
        change()
        ok, why = _both(guards, {"x": instance})
        assert not ok and words in why, why
        namespace.pop("abs", None)
    # a class constant rebound to an equal value still passes
    Owner.limit = float("2.5")
    equal = GuardSet([AttributeIdGuard.of(Owner, "limit", float("2.5"))])
    assert _both(equal, {}) == (True, None)


def test_guard_functions_of_one_source_share_code_but_not_constants():
    # Two classes of one name: the generated sources name them alike, in a comment.
    first, second = type("Same", (), {})(), type("Same", (), {})()
    guards_first, guards_second = GuardSet(), GuardSet()
    guards_first.add_type(X, first)
    guards_second.add_type(X, second)
    check_first, check_second = guards_first.compile(), guards_second.compile()
    assert check_first.source == check_second.source  # compiled once
    assert _both(guards_first, {"x": first}) == (True, None)
    assert not check_first({"x": second}, {})
    assert _both(guards_second, {"x": second}) == (True, None)
    assert not check_second({"x": first}, {})


def test_nn_module_guard_checks_the_class_the_module_has_when_compiled():
    class Other(torch.nn.Linear):
        pass

    module = torch.nn.Linear(2, 2)
    guards = GuardSet()
    guards.add_nn_module(X, module)
    module.__class__ = Other  # as a lazy module's first call does, during capture
    compiled = guards.compile()
    assert compiled({"x": module}, {})
    module.__class__ = torch.nn.Linear
    assert not compiled({"x": module}, {})
    assert "class changed" in compiled.why_failed({"x": module}, {})


@dataclasses.dataclass(frozen=True, slots=True)
class _RawAttr(Source):
    """`object.__getattribute__(base, name)`, written through `__import__('builtins')`."""

    source: Source
    member: str

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"__import__('builtins').object.__getattribute__({base_expr}, {self.member!r})"

    def short_name(self, base_name: str) -> str:
        return f"object.__getattribute__({base_name}, {self.member!r})"


class _Hidden:
    def __getattribute__(self, name):
        raise AttributeError(name)


def test_sources_read_through_an_imported_module_bind_it_once():
    obj = _Hidden()
    object.__setattr__(obj, "size", 3)
    guards = GuardSet()
    guards.add_equals(_RawAttr(X, "size"), 3)
    compiled = guards.compile()
    body = [line for line in compiled.source.splitlines() if not line.lstrip().startswith("#")]
    assert not any("__import__" in line for line in body), compiled.source
    assert _both(guards, {"x": obj}) == (True, None)
    object.__setattr__(obj, "size", 4)
    ok, why = _both(guards, {"x": obj})
    assert not ok and "mismatch" in why


class _CountsReads:
    reads = 0

    def method(self):
        return 1

    def __getattribute__(self, name):
        type(self).reads += 1
        return object.__getattribute__(self, name)


def test_instance_dict_guard_reads_the_real_dict_without_the_class_override():
    obj = _CountsReads()
    guards = GuardSet()
    guards.add(NotInInstanceDictGuard(X, "method"))
    compiled = guards.compile()
    _CountsReads.reads = 0
    assert compiled({"x": obj}, {})
    assert _CountsReads.reads == 0
    assert _both(guards, {"x": obj}) == (True, None)
    object.__setattr__(obj, "method", lambda: 2)
    ok, why = _both(guards, {"x": obj})
    assert not ok and "its own attribute 'method'" in why


def test_mapping_item_guard_compares_an_object_by_identity():
    """A class dict's entry other than a literal (a classmethod) is the same object, not an
    equal one; the guard's code holds it as a constant."""
    from guards import MappingItemGuard

    class Owner:
        @classmethod
        def build(cls):
            return cls()

    entry = Owner.__dict__["build"]
    guards = GuardSet([MappingItemGuard.of(vars(Owner), "Owner.__dict__", "build")])
    assert _both(guards, {}) == (True, None)
    Owner.build = classmethod(entry.__func__)  # an equal-looking, other object
    ok, why = _both(guards, {})
    assert not ok and "Owner.__dict__['build']" in why, why
    Owner.build = entry
    assert _both(guards, {}) == (True, None)
