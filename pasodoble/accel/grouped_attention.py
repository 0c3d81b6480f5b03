"""Grouped-query attention without copies of the key/value heads, for the update's CPU forward and backward.

What: `use_grouped_attention(model)` switches a Hugging Face model whose attention runs through SDPA to the
implementation registered here, `GROUPED_SDPA`, when its query heads share key/value heads and its weights are on
the CPU, and its architecture is one whose code treats every attention name alike (`ARCHITECTURES`: Llama, Mistral,
Qwen2, Qwen3 and their mixtures of experts), and returns whether it did. That implementation hands several-token
attention (the update's forward and backward, a prefill) to the compiled kernel of `accel.train_attention` where it
applies (float32 on the CPU with one torch thread, a span of keys per query), else to
`torch.nn.functional.scaled_dot_product_attention` with `enable_gqa=True`, and everything else (a decode step's single query, position biases, soft-capping, a causal call
over a longer cache) to transformers' own SDPA function unchanged, as does any call on another device (a model moved
after loading). A decode step given `shared_prefix=` (the HF engine's own loop) reads each prompt's cached columns
once for all its samples (`update.prefix_attention`, on any device). The mask is transformers' SDPA mask. The values
agree with the stock path to float rounding (tests/accel/test_grouped_attention.py, tests/rollout/test_prefix_attention.py).

Why: with an attention mask, which every padded or shared-prompt micro-batch has, transformers 5.24 repeats each
key/value head once per query head it serves (`repeat_kv`) before SDPA on any device but XPU and MPS, since CUDA's
fused kernels refuse a masked grouped call. On the CPU the grouped call with a mask is supported, skips that copy in
the forward and its reduction in the backward: the update ran 4% faster on the tiny bench model and 6% faster on
SmolLM2-135M (docs/PERFORMANCE.md). Models on an accelerator keep the stock path.

Run: `use_grouped_attention(model)` once after loading; the Role does it for every model it loads.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from pasodoble.accel import train_attention
from pasodoble.update.prefix_attention import PREFIX_AWARE, prefix_decode_attention
from pasodoble.update.segment_attention import SEGMENT_AWARE, segment_attention

GROUPED_SDPA = "pasodoble_grouped_sdpa"


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # (B, H, Q, D)
    key: torch.Tensor,  # (B, KV, K, D)
    value: torch.Tensor,  # (B, KV, K, D)
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract; returns the (B, Q, H, D) output."""
    q_length, kv_length = query.shape[2], key.shape[2]
    prefix = kwargs.pop("shared_prefix", None)  # the decode loop's prompts, read once per group
    segments = kwargs.pop("packed_segments", None)  # the update's packed rows, attended per sample
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    if segments is not None:
        return segment_attention(query, key, value, segments, scale), None
    if prefix is not None:
        if q_length != 1:
            raise ValueError(f"shared_prefix= is for decode steps of one query column, got {q_length}")
        return prefix_decode_attention(
            query, key, value, attention_mask, scale, prefix, module.layer_idx
        ), None
    causal = (
        q_length > 1
        and attention_mask is None
        and bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    )
    # off the CPU: CUDA's fused kernels refuse a masked grouped call, and its math kernel is slow
    stock = (
        q_length == 1
        or query.device.type != "cpu"
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        or query.shape[1] == key.shape[1]
        or (causal and kv_length > q_length)
    )
    if stock:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    if dropout == 0.0:  # the compiled kernel where it applies (float32, one thread, a span of keys per query)
        out = train_attention.attention(query, key, value, attention_mask, scale, causal)
        if out is not None:
            return out, None
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=True,
    )  # (B, H, Q, D)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)
PREFIX_AWARE.add(GROUPED_SDPA)
SEGMENT_AWARE.add(GROUPED_SDPA)


# Architectures whose modeling code builds its mask and calls attention the same way for every implementation name.
# Some others branch on the name "sdpa" itself (a sparse indexer's block mask, a guard on sliced queries) and would
# silently skip that branch under another name, so only these are switched.
ARCHITECTURES = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe"})


def use_grouped_attention(model: torch.nn.Module) -> bool:
    """Switches `model` (a transformers model of `ARCHITECTURES` on SDPA, its query heads grouped, on the CPU) to
    `GROUPED_SDPA`; returns whether it now runs it."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if getattr(config, "model_type", None) not in ARCHITECTURES:
        return False
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if not heads or heads == kv_heads or not on_cpu:
        return False
    model.set_attn_implementation(GROUPED_SDPA)  # a model that refuses it only logs a warning
    return config._attn_implementation == GROUPED_SDPA
