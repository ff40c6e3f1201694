"""The model zoo: many architectures at tiny sizes, random weights, no downloads.

    ZOO           name -> a function returning a `ZooCase` (transformers models, then
                  torchvision's where torchvision can be imported)
    ZooCase       the model, its positional and keyword inputs

Sizes are tiny (hidden 32-64, 2 layers, short sequences, 32x32 images) so that each
model compiles in seconds on a 2-core machine: the zoo checks what ember captures and
computes across architectures, not speed. Every dropout probability of a config is 0
(training steps compare with eager exactly); anything random in training (SpecAugment
masks, layer drop, stochastic depth) is off.

transformers models are built from their configs (`transformers.<Model>(<Config>(...))`);
torchvision's come from `torchvision.models.<name>(num_classes=10)`. torchvision is found
on sys.path or in the folder named by EMBER_ZOO_TORCHVISION (a `pip install --no-deps
--target` folder; see model_zoo.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

VOCAB = 256
BATCH = 2
LENGTH = 16


@dataclass
class ZooCase:
    name: str
    model: torch.nn.Module
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def _tokens(length: int = LENGTH, vocab: int = VOCAB, low: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(low, vocab, (BATCH, length), generator=generator)


def _floats(*shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(*shape, generator=generator)


def _no_randomness(config: Any) -> Any:
    """Zero every dropout-like probability of a transformers config (and its sub-configs)."""
    for name, value in list(vars(config).items()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _no_randomness(value)
        elif isinstance(value, float) and (
            "dropout" in name
            or "pdrop" in name
            or "drop_prob" in name
            or name.endswith("drop_path_rate")
            or "layerdrop" in name
            or name in ("mask_time_prob", "mask_feature_prob", "drop_rate")
        ):
            setattr(config, name, 0.0)
    return config


def _hf(model_class: str, config_class: str, **config: Any) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    made = _no_randomness(getattr(transformers, config_class)(**config))
    return getattr(transformers, model_class)(made)


# ------------------------------------------------------------- transformers decoders

_DECODER = dict(vocab_size=VOCAB, max_position_embeddings=64, use_cache=False)
_LLAMA_LIKE = dict(
    _DECODER,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def _decoder(name: str, model_class: str, config_class: str, **config: Any) -> ZooCase:
    return ZooCase(name, _hf(model_class, config_class, **config), (_tokens(),))


def gpt2() -> ZooCase:
    config = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, n_positions=64)
    config.update(bos_token_id=0, eos_token_id=0)
    return _decoder("gpt2", "GPT2LMHeadModel", "GPT2Config", use_cache=False, **config)


def gpt_neo() -> ZooCase:
    return _decoder(
        "gpt_neo",
        "GPTNeoForCausalLM",
        "GPTNeoConfig",
        **_DECODER,
        num_layers=2,
        attention_types=[[["global", "local"], 1]],
        hidden_size=64,
        num_heads=4,
        window_size=8,
    )


def gpt_neox() -> ZooCase:
    return _decoder(
        "gpt_neox",
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        **_DECODER,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
    )


def gptj() -> ZooCase:
    config = dict(n_layer=2, n_head=4, n_embd=64, rotary_dim=8, vocab_size=VOCAB, n_positions=64)
    return _decoder("gptj", "GPTJForCausalLM", "GPTJConfig", use_cache=False, **config)


def opt() -> ZooCase:
    return _decoder(
        "opt",
        "OPTForCausalLM",
        "OPTConfig",
        **_DECODER,
        hidden_size=64,
        num_hidden_layers=2,
        ffn_dim=128,
        num_attention_heads=4,
        word_embed_proj_dim=64,
    )


def bloom() -> ZooCase:
    return _decoder(
        "bloom",
        "BloomForCausalLM",
        "BloomConfig",
        vocab_size=VOCAB,
        hidden_size=64,
        n_layer=2,
        n_head=4,
        use_cache=False,
    )


def falcon() -> ZooCase:
    return _decoder(
        "falcon",
        "FalconForCausalLM",
        "FalconConfig",
        **_DECODER,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )


def llama() -> ZooCase:
    return _decoder("llama", "LlamaForCausalLM", "LlamaConfig", **_LLAMA_LIKE)


def mistral() -> ZooCase:
    return _decoder("mistral", "MistralForCausalLM", "MistralConfig", **_LLAMA_LIKE)


def mixtral() -> ZooCase:
    return _decoder(
        "mixtral",
        "MixtralForCausalLM",
        "MixtralConfig",
        **_LLAMA_LIKE,
        num_local_experts=4,
        num_experts_per_tok=2,
    )


def qwen2() -> ZooCase:
    return _decoder("qwen2", "Qwen2ForCausalLM", "Qwen2Config", **_LLAMA_LIKE)


def qwen2_moe() -> ZooCase:
    return _decoder(
        "qwen2_moe",
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        **_LLAMA_LIKE,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=64,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
    )


def phi() -> ZooCase:
    return _decoder("phi", "PhiForCausalLM", "PhiConfig", **_LLAMA_LIKE)


def phi3() -> ZooCase:
    return _decoder("phi3", "Phi3ForCausalLM", "Phi3Config", **_LLAMA_LIKE)


def gemma() -> ZooCase:
    return _decoder("gemma", "GemmaForCausalLM", "GemmaConfig", **_LLAMA_LIKE, head_dim=16)


def gemma2() -> ZooCase:
    return _decoder(
        "gemma2", "Gemma2ForCausalLM", "Gemma2Config", **_LLAMA_LIKE, head_dim=16, sliding_window=8
    )


def stablelm() -> ZooCase:
    return _decoder("stablelm", "StableLmForCausalLM", "StableLmConfig", **_LLAMA_LIKE)


# ------------------------------------------------------------- transformers encoders

_ENCODER = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=64,
)


def _encoder(name: str, model_class: str, config_class: str, **config: Any) -> ZooCase:
    model = _hf(model_class, config_class, **config)
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[1, -4:] = 0  # a padded row: the attention mask takes part
    return ZooCase(name, model, (_tokens(),), {"attention_mask": mask})


def bert() -> ZooCase:
    return _encoder("bert", "BertForMaskedLM", "BertConfig", **_ENCODER)


def roberta() -> ZooCase:
    return _encoder("roberta", "RobertaForMaskedLM", "RobertaConfig", **_ENCODER, pad_token_id=1)


def xlm_roberta() -> ZooCase:
    return _encoder(
        "xlm_roberta", "XLMRobertaForMaskedLM", "XLMRobertaConfig", **_ENCODER, pad_token_id=1
    )


def distilbert() -> ZooCase:
    config = dict(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128)
    return _encoder(
        "distilbert",
        "DistilBertForMaskedLM",
        "DistilBertConfig",
        **config,
        max_position_embeddings=64,
    )


def albert() -> ZooCase:
    return _encoder("albert", "AlbertForMaskedLM", "AlbertConfig", **_ENCODER, embedding_size=32)


def electra() -> ZooCase:
    return _encoder(
        "electra", "ElectraForPreTraining", "ElectraConfig", **_ENCODER, embedding_size=32
    )


def deberta_v2() -> ZooCase:
    return _encoder(
        "deberta_v2",
        "DebertaV2ForMaskedLM",
        "DebertaV2Config",
        **_ENCODER,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["p2c", "c2p"],
    )


def mobilebert() -> ZooCase:
    config = dict(_ENCODER, hidden_size=64, intermediate_size=64)
    return _encoder(
        "mobilebert",
        "MobileBertForMaskedLM",
        "MobileBertConfig",
        **config,
        embedding_size=32,
        intra_bottleneck_size=32,
        true_hidden_size=32,
        num_feedforward_networks=2,
    )


# ----------------------------------------------------- transformers encoder-decoders


def _seq2seq(name: str, model_class: str, config_class: str, **config: Any) -> ZooCase:
    model = _hf(model_class, config_class, **config)
    return ZooCase(name, model, (_tokens(),), {"decoder_input_ids": _tokens(8)})


_BART_LIKE = dict(
    vocab_size=VOCAB,
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    max_position_embeddings=64,
    use_cache=False,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)


def t5() -> ZooCase:
    return _seq2seq(
        "t5",
        "T5ForConditionalGeneration",
        "T5Config",
        vocab_size=VOCAB,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        use_cache=False,
    )


def bart() -> ZooCase:
    return _seq2seq("bart", "BartForConditionalGeneration", "BartConfig", **_BART_LIKE)


def mbart() -> ZooCase:
    return _seq2seq("mbart", "MBartForConditionalGeneration", "MBartConfig", **_BART_LIKE)


def pegasus() -> ZooCase:
    return _seq2seq("pegasus", "PegasusForConditionalGeneration", "PegasusConfig", **_BART_LIKE)


def whisper() -> ZooCase:
    config = dict(_BART_LIKE, num_mel_bins=16, max_source_positions=16, max_target_positions=32)
    del config["max_position_embeddings"]
    model = _hf("WhisperForConditionalGeneration", "WhisperConfig", **config)
    return ZooCase("whisper", model, (_floats(BATCH, 16, 32),), {"decoder_input_ids": _tokens(8)})


# --------------------------------------------------------------- transformers vision

_VIT = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    image_size=32,
    patch_size=8,
)


def _image(name: str, model: torch.nn.Module, size: int = 32, batch: int = BATCH) -> ZooCase:
    return ZooCase(name, model, (_floats(batch, 3, size, size),))


def vit() -> ZooCase:
    return _image("vit", _hf("ViTForImageClassification", "ViTConfig", **_VIT, num_labels=10))


def deit() -> ZooCase:
    model = _hf("DeiTForImageClassificationWithTeacher", "DeiTConfig", **_VIT, num_labels=10)
    return _image("deit", model)


def swin() -> ZooCase:
    model = _hf(
        "SwinForImageClassification",
        "SwinConfig",
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 2],
        window_size=4,
        num_labels=10,
    )
    return _image("swin", model)


def convnext() -> ZooCase:
    model = _hf(
        "ConvNextForImageClassification",
        "ConvNextConfig",
        num_stages=2,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_labels=10,
    )
    return _image("convnext", model)


def resnet_hf() -> ZooCase:
    model = _hf(
        "ResNetForImageClassification",
        "ResNetConfig",
        embedding_size=16,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_labels=10,
    )
    return _image("resnet_hf", model)


def clip() -> ZooCase:
    text = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=32,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
    )
    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    )
    model = _hf("CLIPModel", "CLIPConfig", text_config=text, vision_config=vision)
    return ZooCase(
        "clip", model, (), {"input_ids": _tokens(), "pixel_values": _floats(BATCH, 3, 32, 32)}
    )


def wav2vec2() -> ZooCase:
    model = _hf(
        "Wav2Vec2ForCTC",
        "Wav2Vec2Config",
        vocab_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        mask_time_prob=0.0,
    )
    return ZooCase("wav2vec2", model, (_floats(BATCH, 400),))


TRANSFORMERS: dict[str, Callable[[], ZooCase]] = {
    make.__name__: make
    for make in (
        gpt2, gpt_neo, gpt_neox, gptj, opt, bloom, falcon, llama, mistral, mixtral, qwen2,
        qwen2_moe, phi, phi3, gemma, gemma2, stablelm,
        bert, roberta, xlm_roberta, distilbert, albert, electra, deberta_v2, mobilebert,
        t5, bart, mbart, pegasus, whisper,
        vit, deit, swin, convnext, resnet_hf, clip, wav2vec2,
    )
}  # fmt: skip


# ------------------------------------------------ more architectures (breadth)


def fnet() -> ZooCase:
    # token mixing by a 2-D FFT (torch.fft.fftn) in place of attention
    config = dict(_ENCODER, use_tpu_fourier_optimizations=False)
    del config["num_attention_heads"]
    model = _hf("FNetForMaskedLM", "FNetConfig", **config)
    return ZooCase("fnet", model, (_tokens(),))


def xlnet() -> ZooCase:
    model = _hf(
        "XLNetLMHeadModel",
        "XLNetConfig",
        vocab_size=VOCAB,
        d_model=64,
        n_layer=2,
        n_head=4,
        d_inner=128,
        use_mems_eval=False,
        use_mems_train=False,
    )
    return ZooCase("xlnet", model, (_tokens(),))


def funnel() -> ZooCase:
    model = _hf(
        "FunnelForMaskedLM",
        "FunnelConfig",
        vocab_size=VOCAB,
        d_model=64,
        n_head=4,
        d_head=16,
        d_inner=128,
        block_sizes=[1, 1],
        num_decoder_layers=1,
    )
    return ZooCase("funnel", model, (_tokens(),))


def squeezebert() -> ZooCase:
    return _encoder(
        "squeezebert", "SqueezeBertForMaskedLM", "SqueezeBertConfig", **_ENCODER, embedding_size=64
    )


def mpnet() -> ZooCase:
    return _encoder("mpnet", "MPNetForMaskedLM", "MPNetConfig", **_ENCODER, pad_token_id=1)


def big_bird() -> ZooCase:
    return _encoder(
        "big_bird",
        "BigBirdForMaskedLM",
        "BigBirdConfig",
        **_ENCODER,
        attention_type="original_full",
    )


def gpt_bigcode() -> ZooCase:
    config = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, n_positions=64)
    config.update(bos_token_id=0, eos_token_id=0)
    return _decoder(
        "gpt_bigcode", "GPTBigCodeForCausalLM", "GPTBigCodeConfig", use_cache=False, **config
    )


def codegen() -> ZooCase:
    config = dict(n_layer=2, n_head=4, n_embd=64, rotary_dim=8, vocab_size=VOCAB, n_positions=64)
    config.update(n_ctx=64, bos_token_id=0, eos_token_id=0)
    return _decoder("codegen", "CodeGenForCausalLM", "CodeGenConfig", use_cache=False, **config)


def olmo() -> ZooCase:
    return _decoder("olmo", "OlmoForCausalLM", "OlmoConfig", **_LLAMA_LIKE)


def cohere() -> ZooCase:
    return _decoder("cohere", "CohereForCausalLM", "CohereConfig", **_LLAMA_LIKE)


def granite() -> ZooCase:
    return _decoder("granite", "GraniteForCausalLM", "GraniteConfig", **_LLAMA_LIKE)


def mamba() -> ZooCase:
    model = _hf(
        "MambaForCausalLM",
        "MambaConfig",
        vocab_size=VOCAB,
        hidden_size=32,
        state_size=8,
        num_hidden_layers=2,
        use_cache=False,
    )
    return ZooCase("mamba", model, (_tokens(),))


def rwkv() -> ZooCase:
    model = _hf(
        "RwkvForCausalLM",
        "RwkvConfig",
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        attention_hidden_size=32,
        intermediate_size=64,
        context_length=64,
        use_cache=False,
    )
    return ZooCase("rwkv", model, (_tokens(),))


def marian() -> ZooCase:
    return _seq2seq("marian", "MarianMTModel", "MarianConfig", **_BART_LIKE)


def m2m100() -> ZooCase:
    return _seq2seq("m2m100", "M2M100ForConditionalGeneration", "M2M100Config", **_BART_LIKE)


def blenderbot() -> ZooCase:
    return _seq2seq(
        "blenderbot", "BlenderbotForConditionalGeneration", "BlenderbotConfig", **_BART_LIKE
    )


def prophetnet() -> ZooCase:
    model = _hf(
        "ProphetNetForConditionalGeneration",
        "ProphetNetConfig",
        vocab_size=VOCAB,
        hidden_size=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_encoder_layers=2,
        num_decoder_layers=2,
        num_encoder_attention_heads=4,
        num_decoder_attention_heads=4,
        ngram=2,
        num_buckets=8,
        relative_max_distance=16,
        max_position_embeddings=64,
        use_cache=False,
    )
    return ZooCase("prophetnet", model, (_tokens(),), {"decoder_input_ids": _tokens(8)})


def beit() -> ZooCase:
    config = dict(_VIT, use_relative_position_bias=True, use_mean_pooling=True, num_labels=10)
    return _image("beit", _hf("BeitForImageClassification", "BeitConfig", **config))


def dinov2() -> ZooCase:
    config = dict(_VIT, num_labels=10)
    return _image("dinov2", _hf("Dinov2ForImageClassification", "Dinov2Config", **config))


def segformer() -> ZooCase:
    model = _hf(
        "SegformerForSemanticSegmentation",
        "SegformerConfig",
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
        num_labels=4,
    )
    return _image("segformer", model)


def mobilevit() -> ZooCase:
    model = _hf(
        "MobileViTForImageClassification",
        "MobileViTConfig",
        image_size=32,
        patch_size=2,
        hidden_sizes=[16, 24, 32],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        num_attention_heads=2,
        num_labels=10,
    )
    return _image("mobilevit", model)


def levit() -> ZooCase:
    model = _hf(
        "LevitForImageClassification",
        "LevitConfig",
        image_size=64,
        hidden_sizes=[32, 48, 64],
        num_attention_heads=[2, 2, 2],
        depths=[1, 1, 1],
        key_dim=[8, 8, 8],
        num_labels=10,
    )
    return _image("levit", model, 64)


def hubert() -> ZooCase:
    model = _hf(
        "HubertForCTC",
        "HubertConfig",
        vocab_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        mask_time_prob=0.0,
    )
    return ZooCase("hubert", model, (_floats(BATCH, 400),))


MORE: dict[str, Callable[[], ZooCase]] = {
    make.__name__: make
    for make in (
        fnet, xlnet, funnel, squeezebert, mpnet, big_bird, gpt_bigcode, codegen, olmo, cohere,
        granite, mamba, rwkv, marian, m2m100, blenderbot, prophetnet, beit, dinov2, segformer,
        mobilevit, levit, hubert,
    )
}  # fmt: skip


# ---------------------------------------------------------------------- torchvision

TORCHVISION_VARIABLE = "EMBER_ZOO_TORCHVISION"


def import_torchvision() -> Any:
    """torchvision, from sys.path or the folder in EMBER_ZOO_TORCHVISION.

    NOTE: a torchvision wheel whose C++ ops do not load against this torch (a CUDA
    build beside a CPU torch) still imports its model code, but its meta registrations
    name `torchvision::nms` and `::qnms` unconditionally; their schemas are defined
    here first when the library did not define them (the classification models the
    zoo runs never call them)."""
    folder = os.environ.get(TORCHVISION_VARIABLE)
    if folder and folder not in sys.path:
        sys.path.append(folder)
    if "torchvision" not in sys.modules:
        import importlib.util

        if importlib.util.find_spec("torchvision") is None:
            raise ImportError("torchvision is not installed", name="torchvision")
        if not _has_operator("torchvision::nms"):
            library = torch.library.Library("torchvision", "FRAGMENT")
            library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            library.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
            _LIBRARIES.append(library)
    import torchvision

    return torchvision


_LIBRARIES: list[Any] = []


def _has_operator(name: str) -> bool:
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
    except RuntimeError:  # "operator ... does not exist"
        return False
    return True


def _vision(name: str, size: int = 64, **kwargs: Any) -> Callable[[], ZooCase]:
    """torchvision's `name`, 10 classes, on 4 images of `size` pixels.

    NOTE: 4 images of 64 pixels, not 2 of 32: batch norm in training over 2 values (the
    last stage of a ResNet at 32 pixels is 1x1) is ill-conditioned, eager's own error on
    ResNet-18's gradient norm 0.6% against float64 (norm 8e3), where it is 5e-8 here."""

    def make() -> ZooCase:
        models = import_torchvision().models
        torch.manual_seed(0)
        model = getattr(models, name)(num_classes=10, **kwargs)
        return _image(f"tv_{name}", model, size, batch=4)

    make.__name__ = f"tv_{name}"
    return make


TORCHVISION: dict[str, Callable[[], ZooCase]] = {
    make.__name__: make
    for make in (
        _vision("resnet18"),
        _vision("resnet50"),
        _vision("mobilenet_v2"),
        _vision("mobilenet_v3_small"),
        _vision("efficientnet_b0"),
        _vision("densenet121"),
        _vision("squeezenet1_1"),
        _vision("shufflenet_v2_x0_5"),
        _vision("regnet_y_400mf"),
        _vision("convnext_tiny"),
        _vision("vit_b_16", 32, image_size=32),
        _vision("swin_t"),
        _vision("googlenet", 64, aux_logits=False, init_weights=True),
        _vision("inception_v3", 80, aux_logits=False, init_weights=True),
        _vision("vgg11", 32),
        _vision("mnasnet0_5"),
        _vision("alexnet"),
        _vision("resnext50_32x4d"),
        _vision("mobilenet_v3_large"),
    )
}

ZOO: dict[str, Callable[[], ZooCase]] = {**TRANSFORMERS, **MORE, **TORCHVISION}
