"""What ember.compile returns for functions, methods and modules, and how it behaves before capture."""

import copy
import functools

import torch

import ember
from dynamo_capture.testing import CountingBackend


def add_one(x):
    """Adds one."""
    return x + 1


def test_call_form_keeps_the_function_identity():
    compiled = ember.compile(add_one, backend="eager")
    assert compiled.__name__ == "add_one"
    assert compiled.__doc__ == "Adds one."
    assert compiled.__wrapped__ is add_one
    assert compiled is not add_one


def test_decorator_without_arguments():
    @ember.compile
    def g(x):
        return x * 2

    assert g.__name__ == "g"
    assert ember.api.compiled_callable_of(g).target.__name__ == "g"


def test_decorator_with_arguments_passes_them_through():
    @ember.compile(backend="eager", fullgraph=True, dynamic=False, options={"recompile_limit": 3})
    def g(x):
        return x * 2

    runner = ember.api.compiled_callable_of(g)
    assert runner.fullgraph is True
    assert runner.dynamic is False
    assert runner.recompile_limit == 3


def test_disable_true_returns_the_model_itself():
    assert ember.compile(add_one, disable=True) is add_one
    module = torch.nn.ReLU()
    assert ember.compile(module, disable=True) is module


def test_bound_method():
    class Scaler:
        def __init__(self, k):
            self.k = k

        def scale(self, x):
            return x * self.k

    s = Scaler(3)
    compiled = ember.compile(s.scale, backend="eager")
    assert compiled.__name__ == "scale"
    with ember.set_stance("force_eager"):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))


def test_decorating_a_method_in_a_class_body_binds_self():
    class Model:
        k = 5

        @ember.compile(backend="eager")
        def run(self, x):
            return x * self.k

    with ember.set_stance("force_eager"):
        torch.testing.assert_close(Model().run(torch.ones(2)), torch.full((2,), 5.0))


def test_callable_objects_and_partials():
    partial = functools.partial(torch.add, other=1)
    compiled = ember.compile(partial, backend="eager")
    with ember.set_stance("force_eager"):
        torch.testing.assert_close(compiled(torch.zeros(2)), torch.ones(2))


def test_compiled_function_matches_eager_and_compiles_once():
    backend = CountingBackend()
    compiled = ember.compile(lambda x, y: torch.sin(x) * y + 1, backend=backend)
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(compiled(x, y), torch.sin(x) * y + 1)
    torch.testing.assert_close(compiled(y, x), torch.sin(y) * x + 1)
    assert len(backend.graphs) == 1
    targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.sin in targets


def test_a_new_input_type_recompiles():
    backend = CountingBackend()
    compiled = ember.compile(add_one, backend=backend)
    compiled(torch.ones(2))
    compiled(torch.ones(2, dtype=torch.float64))
    assert len(backend.graphs) == 2


def test_force_eager_runs_the_original():
    compiled = ember.compile(add_one)
    with ember.set_stance("force_eager"):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.register_buffer("steps", torch.zeros(()))
        self.scale = 2.0

    def forward(self, x):
        return self.norm(self.linear(x)) * self.scale


def test_module_wrapper_keeps_parameters_and_state_dict_names():
    block = Block()
    compiled = ember.compile(block, backend="eager")
    assert isinstance(compiled, ember.OptimizedModule)
    assert isinstance(compiled, torch.nn.Module)
    assert compiled._orig_mod is block
    assert list(compiled.state_dict()) == ["_orig_mod." + k for k in block.state_dict()]
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in block.named_parameters()]
    assert [p is q for p, q in zip(compiled.parameters(), block.parameters())] == [True] * 4
    assert [n for n, _ in compiled.named_buffers()] == ["steps"]


def test_module_wrapper_attributes_read_and_write_the_original():
    block = Block()
    compiled = ember.compile(block, backend="eager")
    assert compiled.scale == 2.0
    assert compiled.linear is block.linear
    compiled.scale = 3.0
    assert block.scale == 3.0
    compiled.extra = torch.nn.ReLU()
    assert isinstance(block.extra, torch.nn.ReLU)
    assert "extra" in dict(block.named_children())
    assert "linear" in dir(compiled)


def test_module_wrapper_train_eval_and_repr():
    block = Block()
    compiled = ember.compile(block, backend="eager")
    assert compiled.training and block.training
    assert compiled.eval() is compiled
    assert not block.training and not block.linear.training and not compiled.training
    compiled.train()
    assert block.training
    compiled.training = False
    assert not block.training
    assert repr(compiled) == repr(block)


def test_module_wrapper_load_state_dict_and_to():
    block = Block()
    compiled = ember.compile(block, backend="eager")
    state = {k: torch.ones_like(v) for k, v in block.state_dict().items()}
    compiled.load_state_dict(state)
    torch.testing.assert_close(block.linear.weight, torch.ones(3, 4))
    assert compiled.double() is compiled
    assert block.linear.weight.dtype == torch.float64


def test_module_wrapper_runs_forward_and_hooks_eagerly_under_force_eager():
    block = Block()
    seen = []
    handle = block.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    compiled = ember.compile(block, backend="eager")
    x = torch.randn(2, 4)
    with ember.set_stance("force_eager"):
        torch.testing.assert_close(compiled(x), block(x))
    assert seen == [torch.Size([2, 3])] * 2
    handle.remove()
    compiled.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    with ember.set_stance("force_eager"):
        compiled(x)
    assert seen[-1] == "pre"


def test_compiled_module_matches_eager_and_runs_its_hooks():
    block = Block()
    block.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    block.register_forward_hook(lambda mod, args, out: out + 100)
    backend = CountingBackend()
    compiled = ember.compile(block, backend=backend)
    x = torch.randn(2, 4)
    expected = block(x)
    assert expected.min() > 50
    torch.testing.assert_close(compiled(x), expected)
    # as torch.compile(module): the pre-hook, forward and hook are frames of their own
    assert len(backend.graphs) == 3


def test_compiled_module_sees_train_eval_switches():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(8, 4)
    compiled.eval()
    torch.testing.assert_close(compiled(x), model(x))
    compiled.train()
    torch.manual_seed(0)
    got = compiled(x)
    torch.manual_seed(0)
    torch.testing.assert_close(got, model(x))


def test_module_wrapper_deepcopy_is_compiled_with_the_same_settings():
    compiled = ember.compile(Block(), backend="eager", fullgraph=True)
    duplicate = copy.deepcopy(compiled)
    assert isinstance(duplicate, ember.OptimizedModule)
    assert duplicate._orig_mod is not compiled._orig_mod
    assert ember.api.compiled_callable_of(duplicate).fullgraph is True
    torch.testing.assert_close(duplicate.linear.weight, compiled.linear.weight)


def test_sequential_wrapper_indexes_and_iterates():
    seq = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    compiled = ember.compile(seq, backend="eager")
    assert len(compiled) == 2
    assert compiled[1] is seq[1]
    assert list(compiled) == list(seq)


def test_module_wrapper_pickles_with_its_settings():
    import pickle

    loaded = pickle.loads(pickle.dumps(ember.compile(Block(), backend="eager", fullgraph=True)))
    assert isinstance(loaded, ember.OptimizedModule)
    assert ember.api.compiled_callable_of(loaded).fullgraph is True


def test_reset_makes_the_next_call_compile_again():
    backend = CountingBackend()
    compiled = ember.compile(add_one, backend=backend)
    compiled(torch.ones(1))
    compiled(torch.ones(1))
    assert len(backend.graphs) == 1
    ember.reset()
    torch.testing.assert_close(compiled(torch.ones(1)), torch.full((1,), 2.0))
    assert len(backend.graphs) == 2
