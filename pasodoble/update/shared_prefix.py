"""Token log-probs of a GRPO micro-batch with each distinct prompt run once: the samples of a group share its prefill.

What: `shared_prompt_logprobs(model, prompts, completions, width, ...)` returns the (B, width) log-probs that
`update.logprobs.full_logprobs` returns for the same samples laid out by `roles.role.collate` (prompt, then completion, right
padding; position t scores token t, 0 outside the completions), with the same values to float tolerance and the
same gradients. The distinct prompts of the micro-batch run once, left-padded, with the model's KV cache on and
gradients flowing into it; the cache rows are then selected per sample (a differentiable gather, so each prompt's
gradient is the sum over its samples) and the completions run on top of it, at the positions they have in the plain
layout. The LM head is applied to completion states only, in checkpointed chunks (`chunked_logprobs.score_states`).
`can_share_prompts(model)` says whether a model's cache allows it.

Why: a GRPO batch holds every prompt `num_generations` times, and a PasoDoble prompt (a passage, a question) is often
longer than its completions, so the plain update spends most of its forward and backward FLOPs and activation memory
on copies of the same prompt (issue: performance; figures in docs/PERFORMANCE.md). The J samples of one question now
cost one prompt pass in the update, as they do in generation (`rollout.hf`).

Run: `shared_prompt_logprobs(model, [[1, 2, 3]] * 4, completions, width=9, temperature=0.6)`; tests in
`tests/update/test_shared_prefix.py`. The Role does not use it with gradient checkpointing (Hugging Face switches the cache
off there), on sharded roles (a second forward before one backward is outside DDP's contract), or when its HF engine
re-scores samples for several optimizer passes (those ratios need the re-scoring pass's own numerics).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Sequence

import torch

from pasodoble.update.chunked_logprobs import CHUNK_TOKENS, head_skipped, score_states, supports_chunking


@contextlib.contextmanager
def quiet_cache_rename():
    """transformers 5.24 renames the `past_key_values` argument to `cache` and warns at every call; the 5.x releases
    before it (the vLLM venv's) know only the old name, so the project passes it and silences that one warning."""
    logger = logging.getLogger("transformers.utils.generic")  # its once-per-process notice of the same rename
    notice = logging.Filter()
    notice.filter = lambda record: "cache_params` are deprecated" not in record.getMessage()
    logger.addFilter(notice)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=".past_key_values. is deprecated", category=FutureWarning
            )
            yield
    finally:
        logger.removeFilter(notice)


def can_share_prompts(model: torch.nn.Module) -> bool:
    """True when the model's head is a plain linear layer and its cache is a full-attention dynamic one."""
    config = getattr(model, "config", None)
    if not supports_chunking(model) or config is None:
        return False
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return all(kind == "full_attention" for kind in layer_types) and not getattr(
        config, "sliding_window", None
    )


def gather_cache(cache, rows: torch.Tensor) -> None:
    """Row b of every layer's keys and values becomes row `rows[b]` (U -> B rows; a gather, so gradients sum over
    the rows that share a prompt), stored contiguous: the gather keeps the attention's transposed strides, which
    make every later `torch.cat` of the cache several times slower."""
    for layer in cache.layers:
        layer.keys = layer.keys[rows].contiguous()  # (B, heads, P, head_dim)
        layer.values = layer.values[rows].contiguous()


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts in first-seen order, and each sample's index into them."""
    seen: dict[tuple[int, ...], int] = {}
    index = [seen.setdefault(tuple(p), len(seen)) for p in prompts]
    return [list(p) for p in seen], index


def shared_prompt_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    width: int,
    *,
    pad_id: int,
    temperature: float = 1.0,
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """(B, width) log-probs of `completions[b]` after `prompts[b]`, at the plain layout's positions (see module);
    `temperature` as scored (`update.logprobs`)."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("shared_prompt_logprobs needs a non-empty prompt for every sample")
    device = next(model.parameters()).device
    unique, index = distinct_prompts(prompts)
    rows = torch.tensor(index, device=device)  # (B,)
    lengths = torch.tensor([len(p) for p in unique], device=device)  # (U,)
    wide = max(len(p) for p in unique)
    prompt_ids = torch.tensor(
        [[pad_id] * (wide - len(p)) + p for p in unique], device=device
    )  # (U, P) left-padded
    prompt_mask = (torch.arange(wide, device=device)[None, :] >= wide - lengths[:, None]).long()  # (U, P)
    head = model.get_output_embeddings()
    with head_skipped(head), quiet_cache_rename():
        first = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
        )
        cache = first.past_key_values
        gather_cache(cache, rows)
        longest = max(max((len(c) for c in completions), default=1), 1)
        comp_ids = torch.tensor([list(c) + [pad_id] * (longest - len(c)) for c in completions], device=device)
        comp_len = torch.tensor([len(c) for c in completions], device=device)  # (B,)
        comp_mask = (torch.arange(longest, device=device)[None, :] < comp_len[:, None]).long()  # (B, C)
        hidden = model(
            input_ids=comp_ids,
            attention_mask=torch.cat([prompt_mask[rows], comp_mask], dim=1),
            position_ids=lengths[rows][:, None] + torch.arange(longest, device=device)[None, :],
            past_key_values=cache,
            use_cache=True,
        ).logits  # (B, C, H): the head is skipped
    # completion token k is scored from the state before it: the prompt's last one for k = 0
    states = torch.cat([first.logits[:, -1][rows][:, None], hidden[:, :-1]], dim=1)  # (B, C, H)
    r, k = comp_mask.nonzero(as_tuple=True)
    flat = score_states(
        head, states[r, k], comp_ids[r, k], temperature=temperature, chunk_tokens=chunk_tokens
    )
    if not r.numel():
        flat = flat + states.sum() * 0.0  # no tokens: keep the graph connected
    out = states.new_zeros(len(completions), width, dtype=torch.float32)
    return out.index_put((r, lengths[rows][r] + k), flat)  # (B, width)
