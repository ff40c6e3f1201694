"""Every model the benchmarks and the tests run, defined once (random weights from
configs, no downloads; transformers and torchvision models need those packages).

    MODELS        small configs for CPU runs on a 2-core machine (model tests,
                  model_bench, aot_memory_bench, guards_bench): `MODELS[name]()`
                  returns a `ModelCase`
    GPU_MODELS    full-size configs for the GPU suite (gpu_bench, tools/device):
                  `make, modes = GPU_MODELS[name]`; `make()` returns (model, inputs)
    MLP, ConvBnRelu, TransformerBlock, model_cases
                  small modules for inductor_codegen's kernel tests and
                  inductor_cpu_bench

    from models import MODELS
    case = MODELS["gpt2"]()
    out = case.model(*case.inputs)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


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


class BranchingMLP(nn.Module):
    """An MLP whose forward tests a tensor in Python (`if h.mean() > 0`): a graph break
    at a data-dependent jump, so capture makes a graph before it and a resume after."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512))
        self.head = nn.Sequential(nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(x)
        if h.mean() > 0:
            h = h * 2
        return self.head(h)


def mlp_break() -> ModelCase:
    torch.manual_seed(0)
    return ModelCase("mlp_break", BranchingMLP(), (torch.randn(64, 256),), _logits_loss)


def mlp_dynamic() -> ModelCase:
    """`mlp` with its batch dim marked dynamic: capture makes a graph with symbolic sizes."""
    from guards import mark_dynamic

    case = mlp()
    (x,) = case.inputs
    mark_dynamic(x, 0)
    return ModelCase("mlp_dynamic", case.model, (x,), case.loss)


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


def _tokens(vocab: int, batch: int = 2, length: int = 64, seeded: bool = True) -> torch.Tensor:
    """Token ids; from a generator seeded 0 unless `seeded` is False (the global RNG)."""
    generator = torch.Generator().manual_seed(0) if seeded else None
    return torch.randint(0, vocab, (batch, length), generator=generator)


def transformers_model(model_class: str, config_class: str, **config) -> nn.Module:
    """`transformers.<model_class>(transformers.<config_class>(**config))`."""
    import transformers

    return getattr(transformers, model_class)(getattr(transformers, config_class)(**config))


def gpt2() -> ModelCase:
    torch.manual_seed(0)
    model = transformers_model(
        "GPT2LMHeadModel",
        "GPT2Config",
        n_layer=2,
        n_head=4,
        n_embd=128,
        vocab_size=1000,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )
    return ModelCase("gpt2", model, (_tokens(1000),), _logits_loss)


def bert() -> ModelCase:
    torch.manual_seed(0)
    model = transformers_model(
        "BertModel",
        "BertConfig",
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=128,
        intermediate_size=512,
        vocab_size=1000,
        max_position_embeddings=128,
    )
    return ModelCase("bert", model, (_tokens(1000),), _logits_loss)


def llama() -> ModelCase:
    torch.manual_seed(0)
    model = transformers_model(
        "LlamaForCausalLM",
        "LlamaConfig",
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
    return ModelCase("llama", model, (_tokens(1000),), _logits_loss)


def t5() -> ModelCase:
    torch.manual_seed(0)
    model = transformers_model(
        "T5ForConditionalGeneration",
        "T5Config",
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        d_model=128,
        d_kv=32,
        d_ff=512,
        vocab_size=1000,
    )
    return ModelCase("t5", model, (_tokens(1000), None, _tokens(1000, length=32)), _logits_loss)


def vit() -> ModelCase:
    torch.manual_seed(0)
    model = transformers_model(
        "ViTModel",
        "ViTConfig",
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=128,
        intermediate_size=512,
        image_size=64,
        patch_size=8,
    )
    return ModelCase("vit", model, (torch.randn(2, 3, 64, 64),), _logits_loss)


MODELS: dict[str, Callable[[], ModelCase]] = {
    "mlp": mlp,
    "mlp_break": mlp_break,
    "mlp_dynamic": mlp_dynamic,
    "cnn": cnn,
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "t5": t5,
    "vit": vit,
}


# ---------------------------------------------------------------- the GPU suite

GPU_MODES = ("infer", "train")


class Pointwise(nn.Module):
    """A memory-bound chain: layer norm + softmax + gelu over a large activation."""

    def forward(self, x):
        y = F.layer_norm(x, x.shape[-1:])
        return F.gelu(torch.softmax(y * 0.5, -1) + x)


class Transpose(nn.Module):
    def forward(self, x):
        return (x.transpose(1, 2) * 2).relu().contiguous()


def _gpu_tokens(vocab, batch=8, length=512):
    return _tokens(vocab, batch, length, seeded=False)


def _vision(name, batch):
    def make():
        import torchvision

        return getattr(torchvision.models, name)(), (torch.randn(batch, 3, 224, 224),)

    return make


def _bert():
    model = transformers_model(
        "BertForMaskedLM", "BertConfig", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    return model, (_gpu_tokens(model.config.vocab_size),)


def _gpt2():
    model = transformers_model(
        "GPT2LMHeadModel",
        "GPT2Config",
        use_cache=False,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return model, (_gpu_tokens(model.config.vocab_size),)


def _llama():
    model = transformers_model(
        "LlamaForCausalLM",
        "LlamaConfig",
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=1024,
        use_cache=False,
    )
    return model, (_gpu_tokens(model.config.vocab_size),)


class T5Wrapper(nn.Module):
    """T5-small: encoder over 512 tokens, decoder over 128."""

    def __init__(self):
        super().__init__()
        from transformers import T5Config, T5ForConditionalGeneration

        config = T5Config(
            d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, vocab_size=32128,
            dropout_rate=0.0, use_cache=False, decoder_start_token_id=0,
        )  # fmt: skip
        self.model = T5ForConditionalGeneration(config)

    def forward(self, input_ids, decoder_input_ids):
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits


def _t5():
    return T5Wrapper(), (_gpu_tokens(32128), _gpu_tokens(32128, length=128))


def _mlp():
    model = nn.Sequential(
        nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048), nn.LayerNorm(2048)
    )
    return model, (torch.randn(8192, 2048),)


GPU_MODELS = {
    "resnet50": (_vision("resnet50", 32), GPU_MODES),
    "gpt2": (_gpt2, GPU_MODES),
    "bert_base": (_bert, GPU_MODES),
    "llama": (_llama, GPU_MODES),
    "t5_small": (_t5, GPU_MODES),
    "mobilenet_v3_large": (_vision("mobilenet_v3_large", 64), GPU_MODES),
    "vit_b_16": (_vision("vit_b_16", 32), GPU_MODES),
    "pointwise": (lambda: (Pointwise(), (torch.randn(8192, 4096),)), ("infer",)),
    "transpose": (lambda: (Transpose(), (torch.randn(32, 1024, 2048),)), ("infer",)),
    "mlp": (_mlp, ("infer",)),
}


# ---------------------------------------------------------------- kernel-test modules
# Small real models for inductor_codegen's tests and inductor_cpu_bench: an MLP, a
# conv-bn-relu CNN, a transformer block.


class MLP(nn.Module):
    def __init__(self, width: int = 64, depth: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x)) + x
        return self.norm(x)


class ConvBnRelu(nn.Module):
    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x))) + x
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def model_cases(scale: int = 1):
    """(name, model, example input) for each model; `scale` grows the sizes for benchmarks."""
    torch.manual_seed(0)
    cnn = ConvBnRelu(8 * scale)
    for bn in (cnn.bn1, cnn.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return [
        ("mlp", MLP(64 * scale).eval(), torch.randn(16 * scale, 64 * scale)),
        ("cnn", cnn.eval(), torch.randn(2 * scale, 3, 16 * scale, 16 * scale)),
        (
            "transformer",
            TransformerBlock(32 * scale).eval(),
            torch.randn(2, 16 * scale, 32 * scale),
        ),
    ]
