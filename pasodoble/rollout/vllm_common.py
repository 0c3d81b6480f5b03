"""What the two vLLM engines share: the sampling request, the completion they read back, and the adapter view.

`VLLMEngine` (in process, `rollout/vllm.py`) and `VLLMServerEngine` (over HTTP, `rollout/server.py`) ask vLLM for
the same thing: `vllm_sampling` maps `SamplingParams` onto vLLM's fields (a seed per prompt, log-probs of the
sampled tokens only, greedy calls with every filter off), and `make_completion` turns what comes back into a
`Completion`, refusing an answer without one log-prob per token. `ServesAdapters` gives both engines the same
`generate` and per-adapter entry points over their own `_generate`; `AdapterEngine` is either engine seen through
one LoRA adapter of a shared base (`max_loras=2`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from pasodoble.rollout.base import Completion, SamplingParams

WORKER_EXTENSION = "pasodoble.rollout.vllm_worker.SyncExtension"


def request_seed(seed: int | None, index: int) -> int | None:
    """The seed of prompt `index` in a call seeded `seed` (a pure function; None stays None)."""
    return None if seed is None else (seed * 1_000_003 + index) % (2**31 - 1)


def top_k(sampling: SamplingParams) -> int:
    """vLLM's top_k: -1 (or 0) means off; the project's None / 0 mean off too."""
    return -1 if sampling.temperature == 0 or not sampling.top_k else int(sampling.top_k)


def vllm_sampling(sampling: SamplingParams, index: int) -> dict:
    """vLLM's sampling fields for prompt `index` of a call (the same names in `vllm.SamplingParams` and in the
    OpenAI-compatible server's request body)."""
    greedy = sampling.temperature == 0
    return {
        "n": sampling.n,
        "temperature": sampling.temperature,
        "top_p": 1.0 if greedy else sampling.top_p,
        "top_k": top_k(sampling),
        "min_p": 0.0 if greedy else float(sampling.min_p or 0.0),
        "max_tokens": sampling.max_new_tokens,
        "seed": request_seed(sampling.seed, index),
        "logprobs": 0,
        "skip_special_tokens": True,
    } | ({"stop": list(sampling.stop), "include_stop_str_in_output": True} if sampling.stop else {})


def make_completion(
    ids: Sequence[int], logprobs: Sequence[float], finish_reason: str | None, tokenizer
) -> Completion:
    """A vLLM answer (sampled ids, their log-probs, its finish reason) as a `Completion` ("length" or "stop")."""
    if len(logprobs) != len(ids):
        raise RuntimeError("vLLM returned fewer log-probs than tokens; it must run with logprobs=0")
    finish = "length" if finish_reason == "length" else "stop"
    return Completion(
        tokenizer.decode(list(ids), skip_special_tokens=True), list(ids), list(logprobs), finish
    )


class AdapterHost(Protocol):
    """An engine that serves several LoRA adapters of one base (both vLLM engines)."""

    def generate_adapter(
        self,
        adapter: str,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        on_batch: Callable[[int, list[Completion]], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]: ...

    def sync_adapter(self, name: str, adapter_dir: str | Path) -> None: ...

    def adapter_folder(self, name: str) -> Path: ...

    def for_adapter(self, name: str) -> AdapterEngine: ...

    def close(self) -> None: ...


class AdapterEngine:
    """One LoRA adapter of a shared vLLM engine, as a `RolloutEngine` of its own."""

    copies_weights = True  # the adapter's, written by `update_weights`

    def __init__(self, engine: AdapterHost, name: str):
        self.engine, self.name = engine, name

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        on_batch: Callable[[int, list[Completion]], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        return self.engine.generate_adapter(self.name, prompt_ids, sampling, on_batch, on_progress)

    def update_weights(self, model: torch.nn.Module) -> None:
        """`model` is the role's adapter view (`roles.adapters.AdapterView`); only its adapter travels."""
        folder = self.engine.adapter_folder(self.name)
        shutil.rmtree(folder, ignore_errors=True)
        model.save_adapter(folder)
        try:
            self.engine.sync_adapter(self.name, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Stops the shared engine (idempotent: the other adapter's close then does nothing)."""
        self.engine.close()


class ServesAdapters:
    """`generate`, `generate_adapter`, `for_adapter` and `adapter_folder` of both vLLM engines, over the engine's
    `_generate(adapter, prompt_ids, sampling, on_batch)` and its weights folder `_shm`. vLLM reports a call's
    completions as they come back (`on_batch`), not per decoded token, so `on_progress` is never called."""

    _shm: Path

    def _generate(
        self, adapter: str | None, prompt_ids, sampling: SamplingParams, on_batch
    ) -> list[list[Completion]]:
        raise NotImplementedError

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        on_batch: Callable[[int, list[Completion]], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """`RolloutEngine.generate` on the base model."""
        return self._generate(None, prompt_ids, sampling, on_batch)

    def generate_adapter(
        self,
        adapter: str,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        on_batch: Callable[[int, list[Completion]], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """`generate` through the LoRA adapter `adapter` (synced by `sync_adapter` first)."""
        return self._generate(adapter, prompt_ids, sampling, on_batch)

    def for_adapter(self, name: str) -> AdapterEngine:
        return AdapterEngine(self, name)

    def adapter_folder(self, name: str) -> Path:
        return self._shm / f"save-{name}"
