"""Token sampling for the Hugging Face engine: one uniform number a row by inverse CDF, not `torch.multinomial`.

What: `InverseCdfSampler` is a `LogitsProcessor` that applies the sampling warpers exactly as `generate` would
(transformers' own temperature, top-k, top-p and min-p classes, in `generate`'s order), draws one token per row
from softmax of the result with `draw_rows`, and returns scores that are 0 at the drawn token and -inf elsewhere, so
`generate` run greedily (`do_sample=False`) takes the drawn token. `draw_rows` draws from each row's distribution by
inverse CDF in two levels: blocks of 256 tokens by their masses (each a float32 sum of 256 terms, accumulated over
the blocks in float64), then a token inside the chosen block (a float64 running sum of its 256 terms), so a token's
chance carries the rounding of 256-term sums, not of a 150k-term float32 one. It takes unnormalised weights, so the
engine's decode loop hands it exp(scaled - row max), the buffer its log-prob is read from too, and no softmax of
the vocabulary is built twice (`draw_scaled`). A token of zero probability is never drawn.

Why: on CPU `torch.multinomial` makes one random number per vocabulary entry (the exponential race), 80-100 ms a
decode step for 64 rows of SmolLM2's 49k vocabulary, about an eighth of its decode time; inverse CDF makes one per
row (issue: performance; docs/PERFORMANCE.md). Same distribution; other random draws than `generate`'s own sampler,
so a seed gives other (equally likely) samples than before.

Run: `generate(..., do_sample=False, logits_processor=[InverseCdfSampler(0.6, top_k=None, top_p=1.0, min_p=None)])`,
or `sampler.draw_scaled(scores / temperature, weights)` in the engine's own decode loop (`rollout.decode_loop`);
the distribution tests in `tests/rollout/test_sampling.py` run through it.
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessor,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

BLOCK = 256  # tokens per first-level block


def draw_rows(weights: torch.Tensor) -> torch.Tensor:
    """(B,) one index per row of `weights` (B, V), drawn with chance proportional to the row's entries (>= 0, any
    scale: a softmax or its unnormalised exponentials)."""
    rows, vocab = weights.shape
    pad = (-vocab) % BLOCK
    padded = torch.nn.functional.pad(weights, (0, pad)) if pad else weights  # no copy when the blocks fit
    blocks = padded.reshape(rows, -1, BLOCK)  # (B, nb, BLOCK)
    # (B, nb) cumulative block masses: a float32 sum per block (a float64 one converts the whole (B, V) first,
    # 7x the time), accumulated in float64
    mass = blocks.sum(-1).double().cumsum(-1)
    total = mass[:, -1:]
    u = (torch.rand(rows, 1, dtype=torch.float64, device=weights.device) * total).clamp(
        max=total * (1 - 1e-12)
    )
    block = torch.searchsorted(mass, u, right=True).clamp(
        max=mass.shape[1] - 1
    )  # (B, 1): mass[b-1] <= u < mass[b]
    before = torch.where(block > 0, mass.gather(1, (block - 1).clamp(min=0)), torch.zeros_like(u))
    inside = (
        blocks.gather(1, block[..., None].expand(rows, 1, BLOCK)).squeeze(1).double().cumsum(-1)
    )  # (B, BLOCK)
    rest = torch.minimum(u - before, inside[:, -1:] * (1 - 1e-12))  # rounding must not step past the block
    token = torch.searchsorted(inside, rest, right=True).clamp(max=BLOCK - 1)  # (B, 1)
    return (block * BLOCK + token).squeeze(1)


class InverseCdfSampler(LogitsProcessor):
    """Warps the scores as `generate` would, draws a token per row, and returns scores only that token can win."""

    def __init__(self, temperature: float, *, top_k: int | None, top_p: float, min_p: float | None):
        # `generate`'s order: temperature first, then the warpers that cut the vocabulary
        self.temperature = TemperatureLogitsWarper(temperature) if temperature != 1.0 else None
        self.truncating = []
        if top_k:
            self.truncating.append(TopKLogitsWarper(top_k=top_k))
        if top_p < 1.0:
            self.truncating.append(TopPLogitsWarper(top_p=top_p))
        if min_p:
            self.truncating.append(MinPLogitsWarper(min_p=min_p))

    def draw(self, scores: torch.Tensor, input_ids: torch.LongTensor | None = None) -> torch.Tensor:
        """(B,) one token per row of the raw scores (B, V) (the warpers here never read `input_ids`)."""
        scores = scores.float()
        return self.draw_scaled(self.temperature(input_ids, scores) if self.temperature else scores)

    def draw_scaled(self, scaled: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) one token per row of `scaled` (B, V), float32 scores already divided by the temperature as
        `TemperatureLogitsWarper` divides them. `weights`: exp(scaled - row max), when the caller has them (the
        decode loop, for the log-prob); they are used only when no warper cuts the vocabulary."""
        if self.truncating:
            for warper in self.truncating:
                scaled = warper(None, scaled)
            weights = None
        if weights is None:
            weights = (scaled - scaled.amax(-1, keepdim=True)).exp_()
        return draw_rows(weights)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens = self.draw(scores, input_ids)  # (B,)
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, tokens[:, None], 0.0)
