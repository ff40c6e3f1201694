"""Wrong values of public arguments fail at the call, naming the argument, the value and
what is accepted; none is silently accepted, none fails later inside generated code."""

import pytest
import torch

import ember
from guards import ConstraintViolationError
from prim_decomp import inductor_default


def f(x):
    return x * 2 + 1


# (options, words the message must hold: the option, the value, what is accepted)
BAD_OPTIONS = [
    ({"recompile_limit": -1}, ["'recompile_limit'", "-1", "positive int"]),
    ({"recompile_limit": 0}, ["'recompile_limit'", "0", "positive int"]),
    ({"recompile_limit": 2.0}, ["'recompile_limit'", "2.0", "int"]),
    ({"compile_threads": 0}, ["'compile_threads'", "0", "positive int"]),
    ({"compile_threads": -2}, ["'compile_threads'", "-2", "positive int"]),
    ({"compile_threads": "4"}, ["'compile_threads'", "'4'", "int"]),
    ({"cpp.cxx_flags": [1, 2]}, ["'cpp.cxx_flags'", "[1, 2]", "non-empty str"]),
    ({"cpp.cxx_flags": ["-O2", ""]}, ["'cpp.cxx_flags'", "''", "non-empty str"]),
    ({"cpp.cxx_flags": "-O2"}, ["'cpp.cxx_flags'", "'-O2'", "tuple or list"]),
    ({"cpp.cxx": ""}, ["'cpp.cxx'", "''", "non-empty str"]),
    ({"cpp.cxx": 3}, ["'cpp.cxx'", "3", "str"]),
    ({"cache_dir": ""}, ["'cache_dir'", "''", "folder path"]),
    ({"cache_dir": 5}, ["'cache_dir'", "5", "str"]),
    ({"decompositions": {"a": 1}}, ["'decompositions'", "'a': 1", "ATen operators"]),
    (
        {"decompositions": {torch.ops.aten.sin.default: 1}},
        ["'decompositions'", "aten.sin.default", "callables"],
    ),
    ({"decompositions": [1]}, ["'decompositions'", "[1]", "Mapping"]),
    ({"partitioner": "fast"}, ["'partitioner'", "'fast'", "'min_cut'"]),
    ({"max_autotune": "yes"}, ["'max_autotune'", "'yes'", "bool"]),
    ({"triton.cudagraphs": 1}, ["'triton.cudagraphs'", "1", "bool"]),
    ({"guard_filter_fn": 3}, ["'guard_filter_fn'", "3", "callable"]),
    ({"cxx": "g++"}, ["'cxx'", "did you mean 'cpp.cxx'"]),
    ({"cxx_flags": ["-O2"]}, ["'cxx_flags'", "did you mean 'cpp.cxx_flags'"]),
    ({"cudagraphs": True}, ["'cudagraphs'", "did you mean 'triton.cudagraphs'"]),
    ({1: True}, ["unknown option", "1"]),
]


@pytest.mark.parametrize(("options", "words"), BAD_OPTIONS, ids=lambda v: repr(v)[:40])
def test_bad_option_value_is_rejected_at_the_call(options, words):
    with pytest.raises(ember.InvalidArgumentError) as info:
        ember.compile(f, options=options)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_good_option_values_are_accepted(tmp_path):
    ember.compile(
        f,
        options={
            "recompile_limit": 1,
            "compile_threads": 1,
            "cpp.cxx_flags": ("-O1", "-shared", "-fPIC"),
            "cpp.cxx": "g++",
            "cache_dir": tmp_path,  # a Path as well as a str
            "decompositions": inductor_default,
            "partitioner": "default",
        },
    )
    ember.compile(f, options={"decompositions": {}})


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"fullgraph": None}, ["fullgraph", "None", "True or False"]),
        ({"dynamic": 1}, ["dynamic", "1", "None (automatic), True or False"]),
        ({"disable": "no"}, ["disable", "'no'", "True or False"]),
        ({"mode": 3}, ["mode", "3", "'default'"]),
        ({"backend": None}, ["backend", "None", "inductor"]),
        ({"options": "max_autotune"}, ["options", "dict"]),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_bad_compile_argument_is_rejected_at_the_call(kwargs, words):
    with pytest.raises(ember.InvalidArgumentError) as info:
        ember.compile(f, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_backend_returning_a_non_callable_is_named():
    def returns_int(gm, example_inputs):
        return 3

    compiled = ember.compile(f, backend=returns_int)
    with pytest.raises(ember.CaptureError) as info:
        compiled(torch.randn(3))
    message = str(info.value)
    assert "returns_int" in message and "returned 3 (int), not a callable" in message


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((["force_eager"],), {}, ["['force_eager']", "force_eager", "default"]),
        ((None,), {}, ["None", "force_eager"]),
        (("force_eager",), {"skip_guard_eval_unsafe": "x"}, ["skip_guard_eval_unsafe", "'x'"]),
        (("default",), {"force_backend": 3}, ["force_backend", "3", "backend callable"]),
    ],
)
def test_set_stance_bad_arguments(args, kwargs, words):
    with pytest.raises(ember.StanceError) as info:
        ember.set_stance(*args, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert ember.compile(f, backend="eager")(torch.ones(2)).tolist() == [3.0, 3.0]


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((f,), {"recursive": "x"}, ["recursive", "'x'", "True or False"]),
        ((f,), {"reason": 3}, ["reason", "3", "str"]),
        ((3,), {}, ["function, method or nn.Module", "int"]),
    ],
)
def test_disable_bad_arguments(args, kwargs, words):
    with pytest.raises(TypeError) as info:
        ember.disable(*args, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda x: ember.mark_dynamic(x, 0, min=-1), ValueError, ["min=-1", "negative"]),
        (lambda x: ember.mark_dynamic(x, 0, min=1.5), TypeError, ["min", "1.5", "int"]),
        (lambda x: ember.mark_dynamic(x, 0, max=True), TypeError, ["max", "True", "int"]),
        (lambda x: ember.mark_dynamic(x, 0, min=5, max=2), ValueError, ["min=5", "max=2"]),
        (lambda x: ember.mark_dynamic(x, None), TypeError, ["dim", "None", "int"]),
        (lambda x: ember.mark_dynamic(x, 5), IndexError, ["dimension 5", "2 dimensions"]),
        (lambda x: ember.mark_dynamic(3, 0), TypeError, ["torch.Tensor", "int"]),
        (lambda x: ember.mark_static(3), TypeError, ["torch.Tensor", "int"]),
        (lambda x: ember.maybe_mark_dynamic(x, "0"), TypeError, ["dim", "'0'"]),
    ],
)
def test_mark_dynamic_bad_arguments(call, error, words):
    with pytest.raises(error) as info:
        call(torch.randn(4, 3))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_input_outside_its_mark_dynamic_range_raises(backend):
    compiled = ember.compile(f, backend=backend)
    inside = torch.randn(5, 3)
    ember.mark_dynamic(inside, 0, min=2, max=10)
    torch.testing.assert_close(compiled(inside), f(inside))
    for size in (20, 1):
        outside = torch.randn(size, 3)
        ember.mark_dynamic(outside, 0, min=2, max=10)
        with pytest.raises(RuntimeError, match=rf"size\(\)\[0\] is {size}, not in range \[2, 10\]"):
            compiled(outside)
    # An unmarked tensor of any size still runs (the range belongs to the marked tensor).
    plain = torch.randn(20, 3)
    torch.testing.assert_close(compiled(plain), f(plain))


def test_input_outside_its_mark_dynamic_range_raises_on_the_first_call():
    x = torch.randn(20, 3)
    ember.mark_dynamic(x, 0, min=2, max=10)
    with pytest.raises(ConstraintViolationError, match="is 20, not in range"):
        ember.compile(f, backend="eager")(x)
