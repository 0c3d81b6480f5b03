"""The Hugging Face engine's own decode loop: finished rows leave the batch, and a step does nothing but decode.

What: `decode(model, input_ids, prompt_mask, ...)` prefills a left-padded batch (or, with a cache of all but the
last prompt column, runs only that column), then decodes one token per step for the rows still running: it picks
the token (`choose(scaled, weights)`: greedy argmax or `rollout.sampler.InverseCdfSampler.draw_scaled`), records
its log-prob under the untruncated softmax(logits / temperature) (1 for greedy calls, as `rollout.decode_logprobs`
does), and ends a row at an EOS, at a stop string or at the token budget. Rows that ended are dropped from the input, the attention mask
and every layer's KV cache (`batch_select_indices`) once they are an eighth of the step (a copy of the cache each
time: dropping every row the step it ends cost more than it saved on the tiny bench model). Each layer's cache is
preallocated for the whole decode after the first step (`PreallocatedLayer`): a step writes one column in place,
where transformers' dynamic cache concatenates, copying the whole cache every step (a quarter of the tiny bench
model's decode time). The draw and the log-prob share one pass over the vocabulary: `weights` = exp(scaled - row
max) in a buffer kept for the whole decode, which the sampler draws from and whose row sums give the log-prob's
normaliser (a softmax for the draw and a logsumexp for the log-prob, each with fresh (B, V) tensors, took 6% of
SmolLM2's decode at batch 64).

Why: `generate` decodes every row until the last one ends, and its per-step machinery (logits processors, stopping
criteria, keyword plumbing) costs as much as a small model's forward. On the SmolLM2 GRPO bench 19% of the row-steps
were of rows that had already ended (docs/PERFORMANCE.md). The samples follow the same distribution as through
`generate`; rows drop out of the random draws once ended, so a seed gives other samples than `generate` would.

With `prefix=` (`update.prefix_attention.SharedPrefix`) the rows' cache holds only their own columns and each decode
step reads every prompt's shared columns once for its rows. Used for models whose cache is a plain full-attention
one (`update.shared_prefix.can_share_prompts`); the engine runs `generate` for the others.

Run: `decode(model, ids, mask, max_new_tokens=64, eos_ids=[2], pad_id=0, temperature=0.7,
choose=sampler.draw_scaled)` under `torch.no_grad()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicLayer

from pasodoble.update.logprobs import scored_temperature
from pasodoble.update.prefix_attention import SharedPrefix, padded
from pasodoble.update.shared_prefix import quiet_cache_rename

# Ended rows leave the step once they are 1 / COMPACT_AT of it: a compaction copies every layer's cache, about what
# one step's cache append costs, so ended rows are kept until a few steps' waste outweighs it.
COMPACT_AT = 8


@dataclass
class Decoded:
    tokens: torch.Tensor  # (B, C) the completions, `pad_id` after each row's end
    logprobs: torch.Tensor  # (B, C) float32 log-probs of `tokens`, 0 after each row's end
    lengths: list[int]  # tokens of each row, its EOS or stop string included
    finish: list[str]  # "stop" (EOS or stop string) or "length"


class PreallocatedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are the used prefix of buffers sized for the whole decode: a step
    writes its column in place, where `DynamicLayer` concatenates (a copy of the whole layer cache every step).
    `keys_by_column`: the key buffer is (B, H, D, capacity) and `keys` its transposed view, the layout the compiled
    decode kernel reads fastest (`pasodoble.accel`); `keys` has the same shape and values either way."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int, keys_by_column: bool = False):
        super().__init__()
        self.device, self.is_initialized = keys.device, True
        self.by_column = keys_by_column
        self.key_buffer = self._buffer(keys, capacity, by_column=keys_by_column)
        self.value_buffer = self._buffer(values, capacity)
        self._view(keys.shape[-2])

    @staticmethod
    def _buffer(states: torch.Tensor, capacity: int, by_column: bool = False) -> torch.Tensor:
        rows, heads, used, dim = states.shape
        if by_column:  # (B, H, D, capacity), read by the kernel in whole blocks of columns
            buffer = states.new_empty(rows, heads, dim, padded(max(capacity, used)))
            buffer[..., :used] = states.transpose(-1, -2)
            return buffer
        buffer = states.new_empty(rows, heads, max(capacity, used), dim)  # (B, H, capacity, D)
        buffer[:, :, :used] = states
        return buffer

    def _view(self, used: int) -> None:
        keys = (
            self.key_buffer[..., :used].transpose(-1, -2) if self.by_column else self.key_buffer[:, :, :used]
        )
        self.keys, self.values = keys, self.value_buffer[:, :, :used]

    def update(self, key_states, value_states, *args, **kwargs):
        used, end = self.keys.shape[-2], self.keys.shape[-2] + key_states.shape[-2]
        in_place = self.keys.data_ptr() == self.key_buffer.data_ptr() and end <= self.value_buffer.shape[-2]
        if not in_place:  # past the buffer, or replaced by a method of the parent: plain concatenation
            return super().update(key_states, value_states, *args, **kwargs)
        if self.by_column:
            self.key_buffer[..., used:end] = key_states.transpose(-1, -2)
        else:
            self.key_buffer[:, :, used:end] = key_states
        self.value_buffer[:, :, used:end] = value_states
        self._view(end)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        used = self.keys.shape[-2]
        capacity = self.value_buffer.shape[-2]
        # only the used columns are copied
        self.key_buffer = self._buffer(self.keys[indices], capacity, by_column=self.by_column)
        self.value_buffer = self._buffer(self.values[indices], capacity)
        self._view(used)


def preallocate(cache, capacity: int, keys_by_column: bool = False) -> None:
    """Every plain `DynamicLayer` of `cache` becomes a `PreallocatedLayer` of `capacity` columns."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4:
            cache.layers[i] = PreallocatedLayer(layer.keys, layer.values, capacity, keys_by_column)


class StopStrings:
    """Tells which rows' decoded completion tails hold a stop string (a token is at least one character)."""

    def __init__(self, stops: tuple[str, ...], tokenizer):
        self.stops, self.tokenizer = stops, tokenizer
        self.tail = max(len(s) for s in stops)  # tokens enough to hold the longest one

    def __call__(self, tails: list[list[int]]) -> list[bool]:
        return [any(s in self.tokenizer.decode(ids) for s in self.stops) for ids in tails]


def decode(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_ids: list[int],
    pad_id: int,
    temperature: float,
    choose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    cache=None,
    prefix: SharedPrefix | None = None,
    stop_strings: StopStrings | None = None,
    on_ended: Callable[[int], None] | None = None,
):
    """Decodes `input_ids` (B, W), left-padded with `prompt_mask` (B, W). `cache`: a KV cache of the first W - 1
    columns; or `prefix`: those columns once per distinct prompt, for a model whose attention implementation is in
    `PREFIX_AWARE` (the rows' own cache then starts empty); neither: prefill here. `on_ended(k)`: k more rows
    ended. `choose(scaled, weights)` -> (b,) tokens, from scaled = logits / temperature (b, V) and weights =
    exp(scaled - row max) (b, V). Returns a `Decoded`."""
    rows, device = input_ids.shape[0], input_ids.device
    tokens = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)  # (B, C)
    logprobs = torch.zeros(rows, max_new_tokens, device=device)  # (B, C)
    lengths, finish = [max_new_tokens] * rows, ["length"] * rows
    scale = scored_temperature(temperature)
    eos = torch.tensor(eos_ids, device=device)
    live = torch.arange(rows, device=device)  # (b,) the batch row of each row of the step
    # (b,) False: the row ended and leaves at the next compaction
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    mask = prompt_mask
    position = mask.sum(-1, keepdim=True) - 1  # (b, 1) position of each row's last token
    shared = {} if prefix is None else {"shared_prefix": prefix}
    weights_buffer = None
    if prefix is not None:  # the mask covers only the rows' own columns, none of them padding
        step_ids, positions, mask = input_ids[:, -1:], position, mask.new_ones(rows, 1)
    elif cache is None:
        step_ids, positions = input_ids, (mask.cumsum(-1) - 1).clamp(min=0)
    else:
        step_ids, positions = input_ids[:, -1:], position
    for t in range(max_new_tokens):
        with quiet_cache_rename():
            out = model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
                **shared,
            )
            cache = out.past_key_values
        if t == 0:  # room for every column the decode can add; keys by column where the kernel reads them
            by_column = prefix is not None and prefix.by_column
            preallocate(cache, input_ids.shape[1] + max_new_tokens, keys_by_column=by_column)
        scaled = out.logits[:, -1].float()  # (b, V): the step's own logits, scaled in place
        if scale != 1.0:
            scaled.div_(scale)  # the same float32 division as transformers' temperature warper
        top = scaled.amax(-1, keepdim=True)  # (b, 1)
        if weights_buffer is None:
            weights_buffer = torch.empty_like(scaled)  # (B, V), reused by every step
        weights = torch.sub(scaled, top, out=weights_buffer[: scaled.shape[0]]).exp_()  # (b, V)
        token = choose(scaled, weights)  # (b,)
        logprob = scaled.gather(1, token[:, None]).squeeze(1) - (
            top.squeeze(1) + weights.sum(-1).log()
        )  # (b,)
        running = live[alive]  # (r,)
        tokens[running, t], logprobs[running, t] = token[alive], logprob[alive]
        ended = torch.isin(token, eos) & alive  # (b,)
        if stop_strings is not None:
            first = max(0, t + 1 - stop_strings.tail)
            hits = stop_strings(tokens[running, first : t + 1].tolist())
            ended[alive.nonzero().squeeze(1)[torch.tensor(hits, dtype=torch.bool, device=device)]] = True
        last = t + 1 == max_new_tokens
        for row in live[ended].tolist():
            lengths[row], finish[row] = t + 1, "stop"
        count = len(running) if last else int(ended.sum())  # at the budget every running row ends
        if on_ended is not None and count:
            on_ended(count)
        alive &= ~ended
        if last or not bool(alive.any()):
            break
        ended_rows = len(alive) - int(alive.sum())
        if ended_rows * COMPACT_AT >= len(alive):  # ended rows leave, their cache rows with them
            keep = alive.nonzero().squeeze(1)  # (b',)
            cache.batch_select_indices(keep)
            if prefix is not None:
                prefix.select(keep)
            live, alive, mask, position, token = (x[keep] for x in (live, alive, mask, position, token))
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        position = position + 1
        step_ids, positions = token[:, None], position
    return Decoded(tokens, logprobs, lengths, finish)
