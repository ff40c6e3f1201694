import torch


def test_add(check):
    compiled = check(lambda x, y: (x + y * 2).relu(), torch.randn(3, 4), torch.randn(3, 4))
    assert "relu" in compiled.last_artifacts.graph_code
