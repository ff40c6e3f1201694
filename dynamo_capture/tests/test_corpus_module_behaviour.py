"""nn.Module behaviour: ember's graph and op counts equal torch.compile's, its results and
the state the programs leave equal eager's (programcheck.check_program_like_torch).

    hooks: forward (pre-)hooks with kwargs, prepend, always_call, removed between calls,
        on submodules; hooks with Python side effects; state_dict read in the frame
    parametrizations: parametrize.register_parametrization, cached(), orthogonal,
        weight_norm, spectral_norm in eval
    modules made in the frame: activations, Sequential of them, LayerNorm, a seeded Linear
    attribute mutation in forward: counters, flags, lists, tensors stored, buffers
        updated in place or registered in forward
    containers: ModuleDict / ParameterList / ParameterDict iteration, ModuleList zip and
        reversed, Sequential slices (a new container, callable) and negative indices
    named_parameters / named_children / named_modules / named_buffers loops
    `self.training` branches with .eval() / .train() between calls (recompiles)
    lazy modules, `__call__` overridden, `__getattr__` delegation, properties,
        other methods compiled, submodules and parameters swapped between calls
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: F401
from programcheck import check_program_like_torch, program_table
from torch import nn
from torch.nn.utils import parametrize

PROGRAMS, _program = program_table()


def x44():
    return (torch.linspace(-2, 2, 16).reshape(4, 4),)


class Lin(nn.Module):
    def __init__(s):
        super().__init__()
        torch.manual_seed(0)
        s.lin = nn.Linear(4, 4)

    def forward(s, x):
        return s.lin(x).relu()


def mk(m_cls=Lin):
    torch.manual_seed(0)
    return m_cls()


# ---- hooks ----


@_program
def hook_fwd_removed_between_calls():
    m = mk()
    h = m.register_forward_hook(lambda mod, a, o: o + 1)

    def between(i, fn):
        if i == 1:
            h.remove()

    return dict(fn=m, args=x44, between=between, calls=3)


@_program
def hook_pre_with_kwargs():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.l = nn.Linear(4, 4)

        def forward(s, x, *, scale=1.0):
            return s.l(x) * scale

    torch.manual_seed(0)
    m = M()
    m.register_forward_pre_hook(lambda mod, a, k: (a, {**k, "scale": 2.0}), with_kwargs=True)
    return dict(fn=lambda x: m(x, scale=5.0), args=x44)


@_program
def hook_fwd_with_kwargs():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.l = nn.Linear(4, 4)

        def forward(s, x, *, scale=1.0):
            return s.l(x) * scale

    torch.manual_seed(0)
    m = M()
    m.register_forward_hook(lambda mod, a, k, o: o + k["scale"], with_kwargs=True)
    return dict(fn=lambda x: m(x, scale=5.0), args=x44)


@_program
def hook_on_submodule_of_compiled_fn():
    m = mk()
    m.lin.register_forward_hook(lambda mod, a, o: o.sigmoid())
    return dict(fn=lambda x: m(x) + 1, args=x44)


@_program
def hook_global_module_forward_hook_fn():
    m = mk()
    return dict(fn=lambda x: m(x).sum(), args=x44)


@_program
def hook_prepend():
    m = mk()
    m.register_forward_hook(lambda mod, a, o: o + 1)
    m.register_forward_hook(lambda mod, a, o: o * 2, prepend=True)
    return dict(fn=m, args=x44)


@_program
def hook_always_call():
    m = mk()
    m.register_forward_hook(lambda mod, a, o: o - 1, always_call=True)
    return dict(fn=m, args=x44)


@_program
def hook_pre_returns_single_tensor():
    m = mk()
    m.register_forward_pre_hook(lambda mod, a: a[0] + 10)
    return dict(fn=m, args=x44)


@_program
def hook_mutating_counter_closure():
    m = mk()
    box = [0]

    def h(mod, a, o):
        box[0] += 1
        return o

    m.register_forward_hook(h)
    return dict(fn=m, args=x44, state=lambda fn: box[0], calls=3)


@_program
def hook_module_state_dict_untouched():
    m = mk()

    def fn(x):
        return m(x) + len(m.state_dict())

    return dict(fn=fn, args=x44)


@_program
def hook_state_dict_keys_loop():
    m = mk()

    def fn(x):
        for _k in m.state_dict():
            x = x + 1
        return x

    return dict(fn=fn, args=x44)


# ---- parametrizations / norms ----
class Sym(nn.Module):
    def forward(s, w):
        return w.triu() + w.triu(1).transpose(-1, -2)


@_program
def param_symmetric_linear():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", Sym())
    return dict(fn=lin, args=x44)


@_program
def param_symmetric_in_fn():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", Sym())
    return dict(fn=lambda x: lin(x).sum() + lin.weight.sum(), args=x44)


@_program
def param_cached():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", Sym())

    def fn(x):
        with parametrize.cached():
            return lin(x) + lin(x)

    return dict(fn=fn, args=x44)


@_program
def param_orthogonal():
    torch.manual_seed(0)
    lin = nn.utils.parametrizations.orthogonal(nn.Linear(4, 4))
    return dict(fn=lin, args=x44)


@_program
def param_weight_norm_new():
    torch.manual_seed(0)
    lin = nn.utils.parametrizations.weight_norm(nn.Linear(4, 4))
    return dict(fn=lin, args=x44)


@_program
def param_spectral_norm_eval():
    torch.manual_seed(0)
    lin = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4)).eval()
    return dict(fn=lin, args=x44)


@_program
def param_two_parametrizations():
    class Scale(nn.Module):
        def forward(s, w):
            return w * 2

    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", Sym())
    parametrize.register_parametrization(lin, "weight", Scale())
    return dict(fn=lin, args=x44)


@_program
def param_is_parametrized_branch():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", Sym())

    def fn(x):
        if parametrize.is_parametrized(lin):
            return lin(x) + 1
        return lin(x)

    return dict(fn=fn, args=x44)


# ---- modules created inside frame ----
@_program
def inframe_relu_module():
    return dict(fn=lambda x: nn.ReLU()(x) + nn.Tanh()(x), args=x44)


@_program
def inframe_sequential_of_activations():
    return dict(fn=lambda x: nn.Sequential(nn.ReLU(), nn.Sigmoid())(x), args=x44)


@_program
def inframe_linear_seeded():
    def fn(x):
        torch.manual_seed(1)
        return nn.Linear(4, 2)(x)

    return dict(fn=fn, args=x44)


@_program
def inframe_layernorm():
    return dict(fn=lambda x: nn.LayerNorm(4)(x), args=x44)


@_program
def inframe_softmax_dim():
    return dict(fn=lambda x: nn.Softmax(dim=-1)(x) + nn.LogSoftmax(1)(x), args=x44)


# ---- attribute mutation in forward ----
@_program
def mut_counter_in_forward():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.counter = 0

        def forward(s, x):
            s.counter += 1
            return x * s.counter

    m = M()
    return dict(fn=m, args=x44, calls=3, state=lambda fn: fn.counter)


@_program
def mut_counter_via_fn():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.counter = 0

        def forward(s, x):
            s.counter += 1
            return x + 1

    m = M()
    return dict(fn=lambda x: m(x) * 2, args=x44, calls=3, state=lambda fn: m.counter)


@_program
def mut_attr_tensor_store():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.last = None

        def forward(s, x):
            s.last = x * 2
            return x + 1

    m = M()
    return dict(fn=m, args=x44, state=lambda fn: fn.last)


@_program
def mut_buffer_inplace():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.register_buffer("b", torch.zeros(4))

        def forward(s, x):
            s.b.add_(1)
            return x + s.b

    m = M()
    return dict(fn=m, args=x44, calls=3, state=lambda fn: fn.b.clone())


@_program
def mut_register_buffer_in_forward():
    class M(nn.Module):
        def forward(s, x):
            s.register_buffer("seen", x.sum().reshape(1))
            return x + 1

    m = M()
    return dict(fn=m, args=x44, state=lambda fn: fn.seen.clone())


@_program
def mut_flag_bool_toggle():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.flag = False

        def forward(s, x):
            s.flag = not s.flag
            return x + 1 if s.flag else x - 1

    m = M()
    return dict(fn=m, args=x44, calls=4, state=lambda fn: fn.flag)


@_program
def mut_list_append_attr():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.log = []

        def forward(s, x):
            s.log.append(1)
            return x * len(s.log)

    m = M()
    return dict(fn=m, args=x44, calls=3, state=lambda fn: len(fn.log))


@_program
def mut_setattr_new_attr():
    class M(nn.Module):
        def forward(s, x):
            s.newattr = 5
            return x + s.newattr

    m = M()
    return dict(fn=m, args=x44, state=lambda fn: fn.newattr)


@_program
def mut_param_data_inplace_no_grad():
    m = mk()

    def fn(x):
        with torch.no_grad():
            m.lin.weight.mul_(0.5)
        return m(x)

    return dict(fn=fn, args=x44, state=lambda f: m.lin.weight.clone())


# ---- containers ----
@_program
def cont_moduledict_items():
    torch.manual_seed(0)
    d = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.ReLU(), "c": nn.Linear(4, 4)})

    def fn(x):
        for _k, mod in d.items():
            x = mod(x)
        return x

    return dict(fn=fn, args=x44)


@_program
def cont_moduledict_keys_index():
    torch.manual_seed(0)
    d = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Tanh()})

    def fn(x):
        for k in d:
            x = d[k](x)
        return x + len(d)

    return dict(fn=fn, args=x44)


@_program
def cont_moduledict_contains():
    torch.manual_seed(0)
    d = nn.ModuleDict({"a": nn.Linear(4, 4)})

    def fn(x):
        if "a" in d:
            x = d["a"](x)
        if "z" in d:
            x = x + 100
        return x

    return dict(fn=fn, args=x44)


@_program
def cont_moduledict_values():
    torch.manual_seed(0)
    d = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})
    return dict(fn=lambda x: sum(m(x) for m in d.values()), args=x44)


@_program
def cont_parameterlist_iter():
    torch.manual_seed(0)
    pl = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(3)])

    def fn(x):
        for p in pl:
            x = x * p
        return x

    return dict(fn=fn, args=x44)


@_program
def cont_parameterlist_index_len():
    torch.manual_seed(0)
    pl = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(3)])
    return dict(fn=lambda x: x + pl[-1] * len(pl) + pl[0], args=x44)


@_program
def cont_parameterdict_items():
    torch.manual_seed(0)
    pd = nn.ParameterDict({"w": nn.Parameter(torch.randn(4)), "b": nn.Parameter(torch.randn(4))})

    def fn(x):
        for _k, p in pd.items():
            x = x + p
        return x * pd["w"]

    return dict(fn=fn, args=x44)


@_program
def cont_parameterdict_keys_sorted():
    torch.manual_seed(0)
    pd = nn.ParameterDict({"w": nn.Parameter(torch.randn(4)), "b": nn.Parameter(torch.randn(4))})

    def fn(x):
        for k in sorted(pd.keys()):
            x = x * pd[k]
        return x

    return dict(fn=fn, args=x44)


@_program
def cont_modulelist_enumerate_zip():
    torch.manual_seed(0)
    ml = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def fn(x):
        outs = []
        for i, (a, b) in enumerate(zip(ml, ml[1:])):
            outs.append(a(x) - b(x) * i)
        return torch.stack(outs)

    return dict(fn=fn, args=x44)


@_program
def cont_modulelist_reversed():
    torch.manual_seed(0)
    ml = nn.ModuleList([nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)])

    def fn(x):
        for m in reversed(ml):
            x = m(x)
        return x

    return dict(fn=fn, args=x44)


@_program
def seq_slice():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
    return dict(fn=lambda x: s[1:3](x) + s[:2](x), args=x44)


@_program
def seq_negative_index():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    return dict(fn=lambda x: s[-1](s[0](x)) + len(s), args=x44)


@_program
def seq_slice_step():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
    return dict(fn=lambda x: s[::2](x), args=x44)


@_program
def seq_iterate_with_isinstance():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())

    def fn(x):
        for m in s:
            if isinstance(m, nn.Linear):
                x = m(x) * 2
            else:
                x = m(x)
        return x

    return dict(fn=fn, args=x44)


@_program
def seq_ordereddict_named():
    from collections import OrderedDict

    torch.manual_seed(0)
    s = nn.Sequential(OrderedDict(fc=nn.Linear(4, 4), act=nn.ReLU()))
    return dict(fn=lambda x: s.fc(x) + s(x), args=x44)


@_program
def named_parameters_loop():
    m = mk()

    def fn(x):
        for _name, p in m.named_parameters():
            x = x + p.sum()
        return x

    return dict(fn=fn, args=x44)


@_program
def named_parameters_name_branch():
    m = mk()

    def fn(x):
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                x = x + p
        return x

    return dict(fn=fn, args=x44)


@_program
def parameters_sum_norm():
    m = mk()
    return dict(fn=lambda x: x + sum(p.pow(2).sum() for p in m.parameters()), args=x44)


@_program
def named_children_loop():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def fn(x):
        for _name, c in s.named_children():
            x = c(x)
        return x

    return dict(fn=fn, args=x44)


@_program
def named_modules_count():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 4)))

    def fn(x):
        for _name, mm in s.named_modules():
            if isinstance(mm, nn.Linear):
                x = mm(x)
        return x

    return dict(fn=fn, args=x44)


@_program
def named_buffers_loop():
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4).eval()

    def fn(x):
        for _n, b in bn.named_buffers():
            if b.dtype.is_floating_point:
                x = x + b
        return x

    return dict(fn=fn, args=x44)


@_program
def buffers_and_modules_generators():
    m = mk()
    return dict(fn=lambda x: x * len(list(m.modules())) + len(list(m.buffers())), args=x44)


@_program
def get_submodule_call():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 4)))
    return dict(fn=lambda x: s.get_submodule("1.1")(x) + s.get_parameter("0.bias"), args=x44)


# ---- training flag ----
class Drop(nn.Module):
    def forward(s, x):
        if s.training:
            return x * 2
        return x - 1


@_program
def training_eval_between():
    m = Drop()

    def between(i, fn):
        if i == 1:
            m.eval()
        if i == 2:
            m.train()

    return dict(fn=m, args=x44, between=between, calls=4)


@_program
def training_eval_via_fn():
    m = Drop()

    def between(i, fn):
        if i == 2:
            m.eval()

    return dict(fn=lambda x: m(x) + 1, args=x44, between=between, calls=4)


@_program
def training_batchnorm_eval_switch():
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)

    def between(i, fn):
        if i == 1:
            bn.eval()

    return dict(fn=bn, args=x44, between=between, calls=3, state=lambda fn: fn.running_mean.clone())


@_program
def training_dropout_eval():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    return dict(fn=m, args=x44)


@_program
def training_set_in_frame():
    m = Drop()

    def fn(x):
        m.eval()
        y = m(x)
        m.train()
        return y + m(x)

    return dict(fn=fn, args=x44, state=lambda f: m.training)


@_program
def training_submodule_only_eval():
    class P(nn.Module):
        def __init__(s):
            super().__init__()
            s.a = Drop()
            s.b = Drop()

        def forward(s, x):
            return s.a(x) + s.b(x)

    m = P()

    def between(i, fn):
        if i == 1:
            m.b.eval()

    return dict(fn=m, args=x44, between=between, calls=3)


# ---- lazy ----
@_program
def lazy_linear():
    torch.manual_seed(0)
    m = nn.LazyLinear(3)
    return dict(fn=m, args=x44, calls=3)


@_program
def lazy_linear_in_seq():
    torch.manual_seed(0)
    m = nn.Sequential(nn.LazyLinear(3), nn.ReLU())
    return dict(fn=m, args=x44, calls=3)


@_program
def lazy_linear_preinit():
    torch.manual_seed(0)
    m = nn.LazyLinear(3)
    m(torch.zeros(1, 4))
    return dict(fn=m, args=x44)


@_program
def lazy_conv():
    torch.manual_seed(0)
    m = nn.LazyConv2d(2, 3)
    return dict(fn=m, args=lambda: (torch.linspace(0, 1, 50).reshape(1, 2, 5, 5),), calls=2)


# ---- __call__ / __getattr__ ----
@_program
def call_overridden():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.l = nn.Linear(4, 4)

        def forward(s, x):
            return s.l(x)

        def __call__(s, x):
            return super().__call__(x) * 2

    torch.manual_seed(0)
    m = M()
    return dict(fn=lambda x: m(x) + 1, args=x44)


@_program
def call_overridden_no_forward():
    class M(nn.Module):
        def __call__(s, x):
            return x.sin() + 1

    m = M()
    return dict(fn=lambda x: m(x), args=x44)


@_program
def call_overridden_compile_module():
    class M(nn.Module):
        def forward(s, x):
            return x.cos()

        def __call__(s, *a, **k):
            return super().__call__(*a, **k) + 3

    m = M()
    return dict(fn=m, args=x44)


@_program
def getattr_delegate_wrapper():
    class Wrap(nn.Module):
        def __init__(s, inner):
            super().__init__()
            s.inner = inner

        def __getattr__(s, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(s.inner, name)

        def forward(s, x):
            return s.inner(x) + s.weight.sum()

    torch.manual_seed(0)
    m = Wrap(nn.Linear(4, 4))
    return dict(fn=m, args=x44)


@_program
def getattr_delegate_from_fn():
    class Wrap(nn.Module):
        def __init__(s, inner):
            super().__init__()
            s.inner = inner

        def __getattr__(s, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(s.inner, name)

    torch.manual_seed(0)
    m = Wrap(nn.Linear(4, 4))
    return dict(fn=lambda x: x @ m.weight + m.out_features, args=x44)


@_program
def module_property():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.l = nn.Linear(4, 4)

        @property
        def w2(s):
            return s.l.weight * 2

        def forward(s, x):
            return x @ s.w2

    torch.manual_seed(0)
    m = M()
    return dict(fn=m, args=x44)


@_program
def module_forward_kwargs_default():
    class M(nn.Module):
        def forward(s, x, y=None, *, z=2):
            if y is None:
                return x * z
            return x + y * z

    m = M()
    return dict(fn=lambda x: m(x) + m(x, x, z=3), args=x44)


@_program
def module_compile_method_forward():
    m = mk()
    return dict(fn=m.forward, args=x44)


@_program
def module_other_method():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.l = nn.Linear(4, 4)

        def encode(s, x):
            return s.l(x).tanh()

    torch.manual_seed(0)
    m = M()
    return dict(fn=m.encode, args=x44)


@_program
def module_apply_fn_in_frame():
    torch.manual_seed(0)
    s = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def fn(x):
        names = []
        s.apply(lambda mm: names.append(type(mm).__name__))
        return x * len(names)

    return dict(fn=fn, args=x44)


@_program
def module_requires_grad_check():
    m = mk()

    def fn(x):
        if all(p.requires_grad for p in m.parameters()):
            return m(x)
        return x

    return dict(fn=fn, args=x44)


@_program
def module_freeze_between():
    m = mk()

    def between(i, fn):
        if i == 1:
            m.lin.weight.requires_grad_(False)

    def fn(x):
        out = m(x)
        return out, out.requires_grad

    return dict(fn=fn, args=x44, between=between, calls=3)


@_program
def module_swap_submodule_between():
    m = mk()

    def between(i, fn):
        if i == 1:
            m.lin = nn.Identity()

    return dict(fn=m, args=x44, between=between, calls=3)


@_program
def module_swap_param_between():
    m = mk()

    def between(i, fn):
        if i == 1:
            m.lin.weight = nn.Parameter(torch.ones(4, 4))

    return dict(fn=m, args=x44, between=between, calls=3)


@_program
def module_functional_call():
    from torch.func import functional_call

    m = mk()

    def fn(x):
        p = {k: v * 2 for k, v in m.named_parameters()}
        return functional_call(m, p, (x,))

    return dict(fn=fn, args=x44)


@_program
def module_embedding_bag():
    torch.manual_seed(0)
    e = nn.Embedding(10, 3)
    return dict(fn=lambda i: e(i).sum(1), args=lambda: (torch.tensor([[1, 2], [3, 9]]),))


@_program
def module_in_class_attr_dict_of_modules():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.layers = nn.ModuleDict({str(i): nn.Linear(4, 4) for i in range(3)})

        def forward(s, x):
            for i in range(3):
                x = s.layers[str(i)](x)
            return x

    torch.manual_seed(0)
    m = M()
    return dict(fn=m, args=x44)


@_program
def module_isinstance_checks():
    m = mk()

    def fn(x):
        if (
            isinstance(m, nn.Module)
            and isinstance(m.lin, nn.Linear)
            and not isinstance(m.lin, nn.Conv1d)
        ):
            return x + 1
        return x

    return dict(fn=fn, args=x44)


@_program
def module_type_name_str():
    m = mk()

    def fn(x):
        if type(m.lin).__name__ == "Linear":
            return x + 1
        return x

    return dict(fn=fn, args=x44)


@_program
def module_extra_repr_untouched():
    m = mk()
    return dict(fn=lambda x: x * m.lin.in_features + m.lin.out_features, args=x44)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_like_torch(name):
    check_program_like_torch(PROGRAMS[name])
