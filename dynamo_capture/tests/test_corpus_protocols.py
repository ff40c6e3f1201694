"""Small programs on the Python model code leans on: configs and registries, properties and
descriptors, container subclasses, dunders of user classes, introspection, the standard
library's helpers. Each is one graph (fullgraph) and matches eager on fresh inputs.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import enum
import functools
import inspect
import itertools
import operator

import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(5)


def r(*shape):
    return torch.randn(*shape)


@dataclasses.dataclass
class BlockConfig:
    dim: int = 4
    act: str = "gelu"
    widths: list = dataclasses.field(default_factory=lambda: [1, 2])

    def __post_init__(self):
        self.half = self.dim // 2


class Activation(enum.Enum):
    RELU = "relu"
    GELU = "gelu"


CONFIG = BlockConfig()


def _config_driven(x):
    config = dataclasses.replace(CONFIG, dim=8)
    act = getattr(F, CONFIG.act)
    return act(x) * config.half, Activation(CONFIG.act) is Activation.GELU


class Layer(abc.ABC):
    kinds: dict = {}

    def __init_subclass__(cls, kind=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if kind:
            Layer.kinds[kind] = cls

    @abc.abstractmethod
    def run(self, x): ...


class Shift(Layer, kind="shift"):
    def run(self, x):
        return x + 1


def _registry_of_subclasses(x):
    return Layer.kinds["shift"]().run(x)


class Temperature:
    def __init__(self, value):
        self._value = value

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, new):
        self._value = max(new, 0.1)


def _property_setter_clamps(x):
    t = Temperature(1.0)
    t.value = -3.0
    return x / t.value


class Registry(dict):
    def __getattr__(self, name):
        return self[name]

    def __missing__(self, key):
        return F.relu


def _attribute_registry(x):
    ops = Registry(scale=2)
    return ops["unknown"](x) * ops.scale


class Heads(list):
    def __getitem__(self, index):
        return super().__getitem__(index) * 2


def _list_subclass_own_getitem(x):
    heads = Heads([x, x + 1])
    return heads[0] + heads[1], len(heads)


class Stats:
    def __init__(self, total):
        self.total = total

    def __add__(self, other):
        return Stats(self.total + other.total)

    def __radd__(self, other):
        return self if other == 0 else Stats(self.total + other)

    def __iadd__(self, other):
        self.total = self.total + other.total * 2
        return self


def _user_numbers(x):
    a = sum([Stats(x), Stats(x * 2)])
    a += Stats(x)
    return a.total


def _introspect_helper(x):
    def helper(t, scale=2, *, shift=1):
        return t * scale + shift

    params = inspect.signature(helper).parameters
    defaults = {k: p.default for k, p in params.items() if p.default is not p.empty}
    return helper(x, **{k: v for k, v in defaults.items() if k == "shift"}), sorted(defaults)


def _names_and_strings(x):
    name = "encoder.layer.0.weight"
    prefix, _, rest = name.partition(".")
    parts = name.split(".")
    return x * len(parts), prefix, rest.rsplit(".", 1)[0], "_".join(parts[:2]).upper()


def _sorted_by_value(x):
    sizes = {"a": 3, "b": 1, "c": 2}
    order = [k for k, _ in sorted(sizes.items(), key=operator.itemgetter(1))]
    return x * sizes[order[0]], order, min(sizes, key=sizes.get)


def _counting(x):
    counts = collections.Counter("abca")
    words = collections.defaultdict(list)
    for word in ["ab", "ac", "b"]:
        words[word[0]].append(word)
    return x * counts["a"], counts.most_common(1), dict(words)


def _iterator_helpers(x):
    first, second = itertools.tee([x, x + 1])
    pairs = list(itertools.pairwise(first))
    total = functools.reduce(operator.add, second)
    return pairs[0][1] + total


def _id_keyed_memo(x):
    a, b = [x], [x + 1]
    memo = {id(a): 1, id(b): 2}
    return x * memo[id(b)] + (id(a) != id(b))


def _enum_lookups(x):
    by_value = Activation("relu")
    by_name = Activation["GELU"]
    return x * len(by_name.value), by_value is Activation.RELU


PROGRAMS = {
    "config_driven": (_config_driven, (r(2, 4),)),
    "registry_of_subclasses": (_registry_of_subclasses, (r(3),)),
    "property_setter_clamps": (_property_setter_clamps, (r(3),)),
    "attribute_registry": (_attribute_registry, (r(3),)),
    "list_subclass_own_getitem": (_list_subclass_own_getitem, (r(3),)),
    "user_numbers": (_user_numbers, (r(3),)),
    "introspect_helper": (_introspect_helper, (r(3),)),
    "names_and_strings": (_names_and_strings, (r(3),)),
    "sorted_by_value": (_sorted_by_value, (r(3),)),
    "counting": (_counting, (r(3),)),
    "iterator_helpers": (_iterator_helpers, (r(3),)),
    "id_keyed_memo": (_id_keyed_memo, (r(3),)),
    "enum_lookups": (_enum_lookups, (r(3),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_protocol_programs(name, check):
    fn, args = PROGRAMS[name]
    check(fn, *args)
