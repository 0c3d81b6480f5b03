"""Log-probs of the sampled tokens, read off `generate`'s own decode steps: no second forward pass.

What: `SampledLogprobs`, a `LogitsProcessor` placed ahead of `generate`'s temperature and truncation warpers
(transformers runs caller-supplied processors before them), so it sees each step's raw logits. It keeps one step's
log_softmax(logits / temperature) (B, V) until the next call, whose `input_ids` end with the token drawn from it,
and gathers that token's log-prob; `finish(sequences, width)` gathers the last one. Memory is one (B, V) row per
step, never (B, C, V).

Why: the Hugging Face engine used to re-score every completion with a full forward pass (a third of generation on
the real-model bench). With one update per batch (`num_iterations == 1`) the update's ratio is taken against the
detached current log-probs (`Role`), so the engine's figures are needed only for metrics (the entropy estimate,
the engine/trainer gap) and these decode-step values serve. They are of the untruncated softmax(logits /
temperature), as `rollout.base` asks; greedy calls are scored at temperature 1. They differ from a full forward
only by the numerics of the KV-cached decode (about 1e-6 in float32).

Run: `SampledLogprobs(temperature)` in `generate(logits_processor=LogitsProcessorList([...]))`.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

from pasodoble.update.logprobs import scored_temperature


class SampledLogprobs(LogitsProcessor):
    """Records log p(sampled token) at each decode step; leaves the scores unchanged."""

    def __init__(self, temperature: float):
        self.temperature = scored_temperature(temperature)
        self.steps: list[torch.Tensor] = []  # (B,) per decoded token, in order
        self.pending: torch.Tensor | None = None  # (B, V) log-probs of the step whose token is not yet known

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, width: int) -> torch.Tensor:
        """(B, C) log-probs of `sequences[:, width:]`; steps a deferred stop check undid are dropped."""
        length = sequences.shape[1] - width
        if len(self.steps) < length and self.pending is not None:
            self.steps.append(self.pending.gather(1, sequences[:, -1:]).squeeze(1))
        self.pending = None
        if len(self.steps) < length:
            raise RuntimeError(f"generate made {length} tokens but only {len(self.steps)} decode steps")
        return torch.stack(self.steps[:length], dim=1)
