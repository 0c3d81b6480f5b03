"""Token budgets picked from a model's shape: what `micro_batch_tokens: auto` and `logprob_chunk_tokens: auto` mean.

What: `activation_target(state_bytes, device_bytes)` is the memory one micro-batch's activations may take: the
larger of 64 MiB and 40% of the role's weights, gradients and optimizer states, and on an accelerator (`device_bytes`,
its total memory) at least a fifth of the device. `auto_micro_batch_tokens(...)` divides it by what one
token position keeps for the backward (every layer's working set, or with gradient checkpointing one hidden state
per layer plus one layer's working set; the same terms as the layout's memory estimate, `scale/layout.py`) and
rounds down to a multiple of 64. `auto_logprob_chunk_tokens(...)` gives the loss's LM-head chunks a quarter of the
same target: float32 logits and their gradient, 8 bytes a vocabulary entry, at most 2048 tokens (the fixed default).

Why: the budget that is both fast and under TRL's peak memory was chosen by hand per model (2048 tokens on the tiny
anchor, 640 with 512-token chunks on SmolLM2-135M; docs/PERFORMANCE.md). Too small a budget leaves small models to
per-operation overhead; too large one lets activations, not the model's state, set the peak. Tying the activations
to the state keeps the peak a fixed share above the state whatever the model, with a floor that lets tiny models
batch enough tokens to be fast.

On an accelerator a small model's update is bound by the operators it launches, not by its FLOPs: every
micro-batch runs the model's whole operator list once more. Measured by counting them (the profiler's aten calls, on
a CPU, of a 28-layer Qwen3 of narrow width at the GPU bench's shape, 16 prompts x 8, 256 new tokens): the update at
the state-derived budget (3,008 tokens: 12 micro-batches) called 499,850 operators against 174,303 for a plain loop of
8 padded micro-batches (TRL's, written out; `bench/update_ops.py`), a ratio of 2.9 where the H200's update times were
3.90 s in the project against 1.20 s in TRL (3.3); 3 micro-batches (12,032 tokens) called 138,886. A fifth of an
H200 (30.1 GB) gives 11,904 tokens there. On a CPU nothing changes: its budget is the state's share. The padding-free
update on CUDA (`update.padding_free`) goes further: `padding_free_target` gives a micro-batch half the device less
the role's state, and `micro_batch_tokens` null means that budget there too.

`value_bytes` is the size of the values the backward keeps. A trainable role autocasts over float32 master weights,
and autocast keeps the residual stream, the norms and the softmax in float32 beside the half-precision copies of
each product's inputs, so the Role passes the larger of its compute dtype's size and its weights' (4 for a trained
role in any `dtype`). Counting 2 bytes for `dtype: bfloat16` doubled the budget and measured both slower and larger on
a CPU (SmolLM2-135M, bfloat16 autocast, one core: 1,152 tokens gave a 36.5 CPU-s update at a 4,087 MB step peak,
576 tokens 32.8 CPU-s at 3,799 MB; docs/PERFORMANCE.md).

`needs_checkpointing(...)` is what `gradient_checkpointing: auto` means: checkpointing only where one micro-batch's
activations, every layer's kept, would not fit beside the role's state in half the device (the Proposer and the
Solver train on the same device), with the micro-batch at the budget it would get without checkpointing. The layout
(`pasodoble layout`) and the Role call it with the same numbers; on a CPU the device is the host's memory, so auto
stays off there unless the activations outgrow it.

Run: `auto_micro_batch_tokens(hidden=576, intermediate=1536, layers=30, state_bytes=134_515_008 * 16)` -> 576
(SmolLM2-135M, float32 AdamW); the tiny anchor (hidden 96, intermediate 256, 4 layers) gets 2112.
"""

from __future__ import annotations

import os

ACTIVATION_FLOOR_BYTES = 64 << 20  # the least a micro-batch's activations may take (tiny models)
STATE_SHARE = 0.4  # a micro-batch's activations as a share of weights + gradients + optimizer states
DEVICE_SHARE = 0.2  # on an accelerator, the least share of its memory a micro-batch's activations may take
# padding-free on an accelerator: the share of its memory for the role's state and one micro-batch's activations
# (the rest for the other role, the engines and the allocator's slack)
PADDING_FREE_DEVICE_SHARE = 0.5
LOGITS_SHARE = 0.25  # the loss's LM-head chunk as a share of that activation target
BUDGET_STEP = 64  # budgets are multiples of this many tokens
MAX_AUTO_CHUNK = 2048  # the fixed default chunk: auto never goes above it
CHECKPOINT_SHARE = (
    0.5  # `gradient_checkpointing: auto`: a role's share of its device (two roles train on each)
)


def activation_target(state_bytes: float, device_bytes: float | None = None) -> float:
    """Bytes one micro-batch's activations may take, for a role whose weights + gradients + optimizer states take
    `state_bytes`, on an accelerator of `device_bytes` total memory (None: a CPU)."""
    target = max(ACTIVATION_FLOOR_BYTES, STATE_SHARE * state_bytes)
    return max(target, DEVICE_SHARE * device_bytes) if device_bytes else target


def padding_free_target(state_bytes: float, device_bytes: float | None = None) -> float:
    """Bytes one padding-free micro-batch's activations may take (`update.padding_free`): on an accelerator what
    `PADDING_FREE_DEVICE_SHARE` of it leaves after the role's state, when that is more than `activation_target`'s;
    `activation_target` on a CPU. A micro-batch there is one forward whatever its size, so the budget is as large
    as memory allows (verl's `ppo_max_token_len_per_gpu`)."""
    target = activation_target(state_bytes, device_bytes)
    return max(target, PADDING_FREE_DEVICE_SHARE * device_bytes - state_bytes) if device_bytes else target


def token_activation_bytes(
    *, hidden: int, intermediate: int, layers: int, value_bytes: int = 4, checkpointing: bool = False
) -> int:
    """Bytes one token position keeps for the backward: each layer's working set (about 10 hidden-wide and 4
    MLP-wide values), or with checkpointing one hidden state per layer plus one layer's working set."""
    working = value_bytes * (10 * hidden + 4 * intermediate)
    return layers * value_bytes * hidden + working if checkpointing else layers * working


def _rounded(tokens: float, ceiling: int | None = None) -> int:
    budget = max(BUDGET_STEP, int(tokens) // BUDGET_STEP * BUDGET_STEP)
    return budget if ceiling is None else min(budget, ceiling)


def auto_micro_batch_tokens(
    *,
    hidden: int,
    intermediate: int,
    layers: int,
    state_bytes: float,
    value_bytes: int = 4,
    checkpointing: bool = False,
    device_bytes: float | None = None,
    padding_free: bool = False,
) -> int:
    """Token positions per forward/backward such that their activations fit `activation_target(state_bytes,
    device_bytes)` (`padding_free`: `padding_free_target`)."""
    if min(hidden, intermediate, layers) < 1 or state_bytes < 0:
        raise ValueError("auto_micro_batch_tokens needs positive model sizes and state_bytes >= 0")
    sizes = dict(hidden=hidden, intermediate=intermediate, layers=layers)
    per_token = token_activation_bytes(**sizes, value_bytes=value_bytes, checkpointing=checkpointing)
    target = (padding_free_target if padding_free else activation_target)(state_bytes, device_bytes)
    return _rounded(target / per_token)


def auto_logprob_chunk_tokens(*, vocab: int, state_bytes: float) -> int:
    """LM-head tokens per chunk of the loss such that their float32 logits and gradient (8 bytes an entry) fit a
    quarter of `activation_target(state_bytes)`; at most 2048."""
    if vocab < 1 or state_bytes < 0:
        raise ValueError("auto_logprob_chunk_tokens needs vocab >= 1 and state_bytes >= 0")
    return _rounded(LOGITS_SHARE * activation_target(state_bytes) / (8 * vocab), MAX_AUTO_CHUNK)


def micro_batch_positions(budget: int | None, micro_batch_size: int, max_sequence_length: int) -> int:
    """Token positions of the largest micro-batch: `micro_batch_size` sequences at full length without a token
    budget, else the budget (one whole sequence at least)."""
    return micro_batch_size * max_sequence_length if budget is None else max(budget, max_sequence_length)


def host_memory_bytes() -> int:
    """Physical memory of this machine: a CPU role's device."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def needs_checkpointing(
    *,
    hidden: int,
    intermediate: int,
    layers: int,
    tokens: int,
    state_bytes: float,
    value_bytes: int = 4,
    device_bytes: float | None = None,
) -> bool:
    """`gradient_checkpointing: auto`: on when one micro-batch of `tokens` positions, every layer's activations kept
    (`token_activation_bytes` without checkpointing), does not fit beside the role's weights, gradients and optimizer
    states (`state_bytes`) in its share of the device, `CHECKPOINT_SHARE` of `device_bytes` (None: a CPU, whose
    device is the host's memory)."""
    device = device_bytes if device_bytes else host_memory_bytes()
    sizes = dict(hidden=hidden, intermediate=intermediate, layers=layers, value_bytes=value_bytes)
    return state_bytes + tokens * token_activation_bytes(**sizes) > CHECKPOINT_SHARE * device
