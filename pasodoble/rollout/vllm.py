"""Rollout engine on vLLM in this process (`engine: vllm`): the fast path on a GPU, the correctness path on a CPU.

What: `VLLMEngine` implements `RolloutEngine` over `vllm.LLM`: token-id prompts, `n` samples per prompt, a seed per
request (derived from the call's seed and the prompt's index, so a batch is reproducible whatever vLLM schedules),
the sampled tokens' log-probs (`logprobs=0` with `logprobs_mode="processed_logprobs"`, i.e. under
softmax(logits / temperature), the quantity `update.logprobs.logprobs` computes; greedy calls are scored at temperature
1, as there), and finish reasons. `vllm_common.AdapterEngine` is the same engine seen through one LoRA adapter, so one engine can
serve the Proposer's and the Solver's adapters of one shared base (`max_loras=2`).

Weight sync (`update_weights`, after every optimizer step), full models: with `vllm.weight_sync` direct (the default
on a GPU with one worker) the engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0` while it starts,
as TRL's colocate mode does) and the trainer's tensors go straight into the worker's layer-wise reload
(`rollout.vllm_worker.SyncExtension.pasodoble_load`), cast to the engine's dtype one tensor at a time
(`rollout.weights.cast_tensors`): no file, no host copy, extra memory bounded by one layer. Otherwise (`shm`, the
CPU default) they are written as safetensors under /dev/shm (a folder named after this process; folders of dead runs
are swept when an engine starts: `rollout.shm`) and reloaded by every worker (`pasodoble_reload`: the build's own
layer-wise reload from the folder); either way the tied head is re-tied after the load; adapters are written in peft format and registered under a NEW LoRA id, the old id removed
(re-using an id silently keeps serving the old adapter). The prefix cache is reset after each sync, so no KV block
computed with old weights is reused. A sync that does not finish in `sync_timeout_s` raises.

Departures and limits: with `top_p < 1` or `top_k`, vLLM's processed log-probs are renormalised over the kept
tokens while the loss scores the full softmax; `rollout/logprob_diff/*` shows that gap. Sleep mode (on by default on
a GPU, `rollout.vllm_sleep`): the engine sleeps from its start; a sync wakes the weights only, a rollout wakes the KV
cache too and puts everything back to sleep when it ends. Several workers (tensor parallel) sync through /dev/shm;
vLLM's weight-transfer engines serve the server mode only (`rollout.transfer`).

Run: `VLLMEngine(VLLMConfig(), "path/to/model", tokenizer, max_model_len=2048)`; tests in
`tests/rollout/test_vllm_engine.py` (marker `vllm`, needs `make vllm-env`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from pasodoble.rollout.base import Completion, SamplingParams
from pasodoble.rollout.settings import VLLMConfig, direct_sync, engine_dtype, sleeps
from pasodoble.rollout.shm import WEIGHTS_ROOT_ENV, make_shm_dir, shm_root
from pasodoble.rollout.vllm_common import WORKER_EXTENSION, ServesAdapters, make_completion, vllm_sampling
from pasodoble.rollout.vllm_sleep import SleepCycle
from pasodoble.rollout.weights import cast_tensors, write_weights
from pasodoble.update.precision import DTYPES

_ENGINES = itertools.count()  # engines started in this process (CPU core pinning)


class VLLMEngine(ServesAdapters):
    """`RolloutEngine` over an in-process `vllm.LLM` (see module docstring)."""

    copies_weights = True  # its own copy, written by `update_weights`

    def __init__(
        self,
        cfg: VLLMConfig,
        model_path: str | Path,
        tokenizer,
        *,
        max_model_len: int,
        dtype: str = "float32",
        adapters: Sequence[str] = (),
        max_lora_rank: int = 16,
    ):
        from vllm import LLM

        self.cfg, self.tokenizer = cfg, tokenizer
        self.model_path = str(model_path)
        self.on_cpu = not torch.cuda.is_available()
        index = next(_ENGINES)
        if self.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.cpu_kvcache_space_gb))
            bind = cfg.cpu_threads_bind or str(index % max(os.cpu_count() or 1, 1))
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
        self._shm = make_shm_dir("engine")
        # The reload method's allowed folders; the engine core inherits it. Every in-process engine writes under
        # the shared-memory root, so a second engine of this process (the other role) agrees with the first.
        os.environ[WEIGHTS_ROOT_ENV] = str(shm_root())
        self._version = 0
        self._lora: dict[str, object] = {}  # adapter name -> current LoRARequest
        self._lora_ids = itertools.count(1)
        kwargs = {}
        if adapters:
            kwargs.update(enable_lora=True, max_loras=max(len(adapters), 1), max_lora_rank=max_lora_rank)
        self.dtype = engine_dtype(cfg, dtype)
        self.direct = direct_sync(cfg, cuda=not self.on_cpu)
        with engine_core_here(self.direct):
            self.llm = LLM(
                model=self.model_path,
                tokenizer=self.model_path,
                dtype=self.dtype,
                max_model_len=cfg.max_model_len or max_model_len,
                gpu_memory_utilization=cfg.gpu_memory_utilization,
                tensor_parallel_size=cfg.tensor_parallel_size,
                enforce_eager=cfg.enforce_eager if cfg.enforce_eager is not None else self.on_cpu,
                enable_prefix_caching=cfg.enable_prefix_caching,
                enable_sleep_mode=sleeps(cfg, cuda=not self.on_cpu),
                logprobs_mode="processed_logprobs",
                worker_extension_cls=WORKER_EXTENSION,
                seed=0,
                **kwargs,
            )
        self.sleep = SleepCycle(self.llm, sleeps(cfg, cuda=not self.on_cpu))
        self.sleep.start()

    # ------------------------------------------------------------------ sampling
    def _generate(
        self, adapter: str | None, prompt_ids, sampling: SamplingParams, on_batch
    ) -> list[list[Completion]]:
        from vllm import SamplingParams as VSamplingParams
        from vllm import TokensPrompt

        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("VLLMEngine.generate got an empty prompt; every prompt needs at least one token")
        self.sleep.for_generation()
        params = [VSamplingParams(**vllm_sampling(sampling, i)) for i in range(len(prompt_ids))]
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids]
        lora = self._lora.get(adapter) if adapter is not None else None
        if adapter is not None and lora is None:
            raise RuntimeError(f"adapter {adapter!r} has not been synced to the vLLM engine yet")
        try:
            outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False, lora_request=lora)
        finally:
            self.sleep.after_generation()
        result = [
            [
                make_completion(
                    o.token_ids,
                    [entry[tok].logprob for tok, entry in zip(o.token_ids, o.logprobs or [])],
                    o.finish_reason,
                    self.tokenizer,
                )
                for o in out.outputs
            ]
            for out in outputs
        ]
        if on_batch is not None:
            on_batch(0, [c for completions in result for c in completions])
        return result

    # ------------------------------------------------------------------ weight sync
    def update_weights(self, model: torch.nn.Module) -> None:
        """Load `model`'s full weights into every worker (see module docstring)."""
        if self.direct:
            self.load_direct(model)
        else:
            self.reload_through_shm(model)

    def load_direct(self, model: torch.nn.Module) -> None:
        """`model`'s tensors straight into the in-process worker, cast layer by layer (needs `weight_sync: direct`)."""
        if not self.direct:
            raise RuntimeError("load_direct needs an engine started with vllm.weight_sync=direct")
        self._version += 1
        self.sleep.for_load()
        self._rpc("pasodoble_load", cast_tensors(model, DTYPES[self.dtype]))
        self.llm.reset_prefix_cache()

    def reload_through_shm(self, model: torch.nn.Module) -> None:
        """`model` written as safetensors under /dev/shm, then reloaded by every worker from there."""
        self._version += 1
        folder = self._shm / f"weights-{self._version}"
        write_weights(model, folder)
        try:
            self.sleep.for_load()
            self._rpc("pasodoble_reload", str(folder))
            self.llm.reset_prefix_cache()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sync_adapter(self, name: str, adapter_dir: str | Path) -> None:
        """Serve `name` from the peft adapter folder `adapter_dir` under a new LoRA id; drop the old one."""
        from vllm.lora.request import LoRARequest

        self._version += 1
        folder = self._shm / f"{name}-{self._version}"
        shutil.copytree(adapter_dir, folder)
        old = self._lora.get(name)
        request = LoRARequest(name, next(self._lora_ids), str(folder))
        self.sleep.for_load()
        start = time.perf_counter()
        self.llm.llm_engine.add_lora(request)
        if time.perf_counter() - start > self.cfg.sync_timeout_s:
            raise TimeoutError(
                f"vLLM took longer than sync_timeout_s={self.cfg.sync_timeout_s} to add {name}"
            )
        self._lora[name] = request
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()

    def _rpc(self, method: str, *args) -> None:
        try:
            self.llm.collective_rpc(method, timeout=self.cfg.sync_timeout_s, args=args)
        except TimeoutError:
            raise TimeoutError(
                f"vLLM weight sync ({method}) did not finish within sync_timeout_s={self.cfg.sync_timeout_s}; "
                "the engine may be dead or overloaded"
            ) from None

    def close(self) -> None:
        """Stop the engine's processes (idempotent)."""
        shutil.rmtree(self._shm, ignore_errors=True)
        llm, self.llm = getattr(self, "llm", None), None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    def __del__(self):
        shutil.rmtree(getattr(self, "_shm", "/nonexistent"), ignore_errors=True)


@contextlib.contextmanager
def engine_core_here(here: bool):
    """While an engine starts: its engine core in this process (`here`), so its worker can take this process's
    tensors; the setting is put back afterwards, so a server started later keeps vLLM's default."""
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    before = os.environ.get(key)
    if here:
        os.environ[key] = "0"
    try:
        yield
    finally:
        if here:
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before
