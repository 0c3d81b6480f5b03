"""Tiny models and tokenizers for the loop's tests: a character-level fast tokenizer with a Qwen-style chat
template and randomly initialised two-layer Qwen3 models, built locally in seconds (no network)."""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: every printable ASCII character is one token."""
    chars = sorted(set(string.printable))
    vocab = {tok: i for i, tok in enumerate(SPECIAL + chars)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_model(tokenizer, seed: int = 0, hidden_size: int = 32) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return Qwen3ForCausalLM(cfg)


def save_tiny(dirpath: Path, seed: int = 0) -> Path:
    """Save a tiny model + tokenizer in Hugging Face format; returns the folder."""
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    dirpath.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dirpath)
    tokenizer.save_pretrained(dirpath)
    return dirpath
