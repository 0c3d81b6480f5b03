"""The rollout interface: one small protocol that every generation engine implements.

The dual-play loop, the evaluations and the benchmark harness only call `generate`, `update_weights` and `close`,
and sharding reads `copies_weights`. Engines (Hugging Face `generate`, vLLM in process, a vLLM server) live one per
file behind this protocol, built by `rollout.factory`, so no caller branches on which engine it has.

Prompts go in as token ids, not text: the caller applies the chat template and truncation once and uses the same
ids for generation and for the loss. (The reference code truncated the prompt differently in the two places.)

Sampling is exactly what `SamplingParams` says: softmax(logits / temperature), truncated by `top_k`, `top_p` and
`min_p` only when they are set (each is off by default), and by nothing else; an engine must not let a library
default or a checkpoint's generation_config.json add a filter. The log-probs an engine reports are those of the
untruncated softmax(logits / temperature), the distribution the loss differentiates; with a truncation active
the sampled tokens come from the renormalised truncated distribution, but are scored under the full one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # nucleus sampling mass; 1.0 keeps the whole distribution
    top_k: int | None = None  # keep the k most likely tokens; None or 0: off
    min_p: float | None = None  # drop tokens below min_p x the top token's probability; None or 0: off
    max_new_tokens: int = 256  # completion budget in tokens
    seed: int | None = None  # seeds the sampler for this call; None draws from the global RNG
    # generation may end once a completion's text holds one of these; the text keeps it (and at most the rest of
    # the token that completed it), so a caller cuts there; () lets only EOS and the budget end it
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0
        ):
            raise ValueError(
                f"SamplingParams.top_k must be an integer >= 0 or None (off), got {self.top_k!r}"
            )
        if self.min_p is not None and not 0 <= self.min_p < 1:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1) or None (off), got {self.min_p!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must be a tuple of non-empty strings, got {self.stop!r}")


@dataclass
class Completion:
    text: str  # decoded completion, special tokens removed
    token_ids: list[int]  # sampled ids, EOS included when generated, no padding
    logprobs: list[
        float
    ]  # log-prob of each sampled id under the untruncated softmax(logits / temperature); temperature 1 if greedy
    finish_reason: str  # "stop" (EOS) or "length" (budget exhausted)
    policy_version: int | None = None  # update count of the generating role (`Role.generate`); None: unknown


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        on_batch: Callable[[int, list[Completion]], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """One list per prompt, each holding `sampling.n` completions.

        `on_batch(first, completions)`, when given, is called as completions become ready (`first` is the index of
        the first one in the flat prompt-major order, prompt i's sample j at i * n + j), so a caller can save them
        before the call returns; an engine that finishes everything at once calls it once. `on_progress(k)`, when
        given, says that k more sequences have finished, for progress bars (an engine may never call it)."""
        ...

    # True: the engine samples from its own copy of the weights (vLLM), so a sharded role hands `update_weights`
    # its full weights (`rollout.weights.FullWeights`, read through `state_dict()`); False: it reads the live module.
    copies_weights: bool

    def update_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from `model`'s current weights (called after each optimizer step). A trainable
        role's parameters are float32 master weights; an engine holding its own copy casts them to its dtype."""
        ...

    def close(self) -> None:
        """Release what the engine holds (processes, a server, weight folders); idempotent, and a no-op for an
        engine that holds nothing."""
        ...
