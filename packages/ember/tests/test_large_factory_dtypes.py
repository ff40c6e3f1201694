"""A factory with an explicit dtype its kernel lacks raises eager's error at any size.

The check runs the factory once where its result is small (65,536 elements at most),
else a copy of it making about one element; generated code never reaches the kernel.
"""

from __future__ import annotations

import pytest
import torch

import ember

REJECTED = {
    "arange_of_bool": lambda a: a + torch.arange(0, 100_000, dtype=torch.bool).sum(),
    "arange_end_only_of_bool": lambda a: a + torch.arange(100_000, dtype=torch.bool).sum(),
    "arange_with_step_of_bool": lambda a: a + torch.arange(0, 300_000, 3, dtype=torch.bool).sum(),
    "randn_of_int": lambda a: a + torch.randn(300, 300, dtype=torch.int32).sum(),
    "rand_of_long": lambda a: a + torch.rand(300, 300, dtype=torch.int64).sum(),
    "eye_of_complex_half": lambda a: a + torch.eye(300, dtype=torch.complex32).real.sum(),
    "linspace_of_complex_half": lambda a: (
        a + torch.linspace(0, 1, 100_000, dtype=torch.complex32).real.sum()
    ),
}
ACCEPTED = {
    "arange_of_double": lambda a: a + torch.arange(0, 100_000, dtype=torch.float64).sum(),
    "arange_of_int": lambda a: a + torch.arange(100_000, dtype=torch.int32).sum(),
    "full_of_half": lambda a: a + torch.full((300, 300), 0.5, dtype=torch.float16).sum(),
    "zeros_of_bool": lambda a: a + torch.zeros(300, 300, dtype=torch.bool).sum(),
    "linspace_of_double": lambda a: a + torch.linspace(0, 1, 100_000, dtype=torch.float64).sum(),
}
BACKENDS = ["aot_eager", "inductor"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(REJECTED))
def test_large_factory_with_a_dtype_its_kernel_lacks_raises(name, backend):
    fn = REJECTED[name]
    x = torch.randn(3)
    with pytest.raises(Exception) as eager:
        fn(x)
    with pytest.raises(type(eager.value)):
        ember.compile(fn, backend=backend)(x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_large_factory_with_a_dtype_its_kernel_has_runs(name, backend):
    fn = ACCEPTED[name]
    x = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(ember.compile(fn, backend=backend)(x), fn(x))
