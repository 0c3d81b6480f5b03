"""What every engine's sampling-distribution test shares: a random 400-token Qwen3 whose next-token distribution
after PROMPT is spread out, and a total-variation check of N draws against an expected distribution.

The bound: E[TV] <= sum_i sqrt(p_i (1 - p_i) / N) / 2, and TV moves by at most 1/N per draw, so (McDiarmid) TV
exceeds that plus sqrt(ln(1e9) / 2N) with probability below 1e-9.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

VOCAB, DRAWS, TEMPERATURE = 400, 4000, 0.8
PROMPT = [5, 17, 42, 9]


def spread_lm(head_dim: int = 8, heads: int = 4, kv_heads: int = 2, spread: float = 10.0):
    """(model, tokenizer, p): a 400-token random Qwen3 whose next-token logits after PROMPT have a standard deviation
    of ~1, and p = softmax(those logits / TEMPERATURE). vLLM's CPU build needs head_dim >= 32."""
    vocab = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        eos_token_id=1,
        pad_token_id=0,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(spread)  # std 0.02 gives near-uniform logits; 10 spreads them (std ~1)
        logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -1].float()
    return model, tokenizer, torch.softmax(logits / TEMPERATURE, -1)


def tv_bound(p: torch.Tensor, draws: int = DRAWS) -> float:
    return float((p * (1 - p) / draws).sqrt().sum() / 2) + math.sqrt(math.log(1e9) / (2 * draws))


def check_distribution(completions, p: torch.Tensor) -> set[int]:
    """Asserts the first tokens of `completions` follow p (TV bound above); returns the distinct tokens drawn."""
    draws = len(completions)
    counts = Counter(c.token_ids[0] for c in completions)
    empirical = torch.zeros_like(p)
    for token, count in counts.items():
        empirical[token] = count / draws
    tv = float((empirical - p).abs().sum() / 2)
    assert tv < tv_bound(p, draws), (tv, tv_bound(p, draws))
    return set(counts)


def top_k_distribution(p: torch.Tensor, k: int) -> torch.Tensor:
    top = p.topk(k).indices
    out = torch.zeros_like(p)
    out[top] = p[top] / p[top].sum()
    return out


def min_p_distribution(p: torch.Tensor, min_p: float) -> torch.Tensor:
    keep = p >= min_p * p.max()
    return torch.where(keep, p, 0) / p[keep].sum()
