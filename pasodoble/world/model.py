"""Tiny Qwen3-architecture models for the CPU world, saved in Hugging Face format.

Why: the tiny models are loaded by the same `AutoModelForCausalLM.from_pretrained` path as `Qwen/Qwen3-1.7B-Base`,
so every code path of the framework (SFT, rollouts, RL, checkpoints) runs unchanged on a laptop CPU. Proposer and
Solver start from the same base, as in the paper.

Default size: hidden 96, 4 layers, MLP 256, 4 query / 2 key-value heads of 24, tied embeddings: 0.43M parameters.
Measured on one busy CPU thread: SFT at 5-8k tokens/s. Hidden 128 (0.82M) lost no less per step over the first 150
steps of our trials and costs about twice the time; 2 threads on a shared 2-core machine were up to 15x slower than 1.
"""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from pasodoble.world.config import ModelConfig


def build_model(config: ModelConfig, tokenizer, seed: int) -> Qwen3ForCausalLM:
    """A randomly initialised tiny Qwen3 (seeded), sized for `tokenizer`."""
    qwen = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10_000.0,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(qwen)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())
