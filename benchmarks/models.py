"""The model suite shared by the benchmarks and the model tests.

Each entry builds a model from a small config with random weights (no downloads)
and an example input, for CPU runs on a 2-core machine. `MODELS[name]()` returns
a `ModelCase`. transformers models need the `transformers` package.

    from models import MODELS
    case = MODELS["gpt2"]()
    out = case.model(*case.inputs)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelCase:
    name: str
    model: torch.nn.Module
    inputs: tuple
    # Reduces the model's output to a scalar loss for training benchmarks.
    loss: Callable[[object], torch.Tensor]


def _logits_loss(output) -> torch.Tensor:
    logits = output.logits if hasattr(output, "logits") else output
    if hasattr(output, "last_hidden_state") and not hasattr(output, "logits"):
        logits = output.last_hidden_state
    # sin keeps gradients alive through normalization layers (a squared norm would not).
    return logits.float().sin().mean()


def mlp() -> ModelCase:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 10),
    )
    return ModelCase("mlp", model, (torch.randn(64, 256),), _logits_loss)


def cnn() -> ModelCase:
    torch.manual_seed(0)
    layers = []
    channels = 3
    for width in (16, 32, 64):
        layers += [
            torch.nn.Conv2d(channels, width, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(width),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        ]
        channels = width
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)]
    return ModelCase(
        "cnn", torch.nn.Sequential(*layers), (torch.randn(8, 3, 32, 32),), _logits_loss
    )


def _tokens(vocab: int, batch: int = 2, length: int = 64) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def gpt2() -> ModelCase:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=128,
        vocab_size=1000,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )
    return ModelCase("gpt2", GPT2LMHeadModel(config), (_tokens(1000),), _logits_loss)


def bert() -> ModelCase:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=128,
        intermediate_size=512,
        vocab_size=1000,
        max_position_embeddings=128,
    )
    return ModelCase("bert", BertModel(config), (_tokens(1000),), _logits_loss)


def llama() -> ModelCase:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=128,
        intermediate_size=344,
        vocab_size=1000,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
    )
    return ModelCase("llama", LlamaForCausalLM(config), (_tokens(1000),), _logits_loss)


def t5() -> ModelCase:
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        d_model=128,
        d_kv=32,
        d_ff=512,
        vocab_size=1000,
    )
    model = T5ForConditionalGeneration(config)
    return ModelCase("t5", model, (_tokens(1000), None, _tokens(1000, length=32)), _logits_loss)


def vit() -> ModelCase:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=128,
        intermediate_size=512,
        image_size=64,
        patch_size=8,
    )
    return ModelCase("vit", ViTModel(config), (torch.randn(2, 3, 64, 64),), _logits_loss)


MODELS: dict[str, Callable[[], ModelCase]] = {
    "mlp": mlp,
    "cnn": cnn,
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "t5": t5,
    "vit": vit,
}
