"""Rollout engine on a Hugging Face model: the CPU / test path, and a fallback on one GPU.

It samples from the live training model (no copy, so `update_weights` is a no-op) in batches of `batch_size`
sequences with left padding, with its own decode loop (`rollout.decode_loop`: a row that ended leaves the batch and
its KV cache, and a step runs nothing but the forward and the draw); models whose cache that loop does not handle
(sliding windows, hybrids) go through `model.generate`. The log-probs of the sampled tokens are read off the decode
steps (no second pass). With `rescore=True` (a role that takes several optimizer steps per batch, whose later
ratios need the generating policy's log-probs in the loss's own numerics) they are recomputed afterwards with one
forward pass per micro-batch through `update.logprobs.logprobs`, the function the loss uses. Either way they are
log-probs of the untruncated softmax(logits / temperature) even when `top_k` / `top_p` / `min_p` truncate what is
sampled (see `rollout.base`).

Sampling is set only by `SamplingParams`: tokens are drawn by `rollout.sampler`, which warps the scores as
`SamplingParams` says and draws one token per row by inverse CDF (far cheaper on CPU than `torch.multinomial`);
through `generate` it runs greedily over the sampler's scores, with a bare generation config swapped in for the
call, so no field of a checkpoint's generation_config.json (top_k, temperature, repetition_penalty...) and no
library default applies. The n samples of a prompt share one prefill of it (`_shared_prefill`), and with an
attention implementation in `update.prefix_attention.PREFIX_AWARE` (the Role's grouped one) the decode steps read
that prompt's cached columns once for all n rows instead of a copy per row. With
`autocast_dtype` (a trainable role's float32 master weights, `pasodoble.update.precision`), sampling and log-probs
run under autocast to that dtype, as the loss's forward does. No decode step communicates: a sharded role generates
inside `Role.gathered()`, on full weights (and `generate` gets `synced_gpus=False`: transformers switches it on for
an FSDP module on several ranks, an all-reduce per decoded token, which hangs when ranks make different numbers of
calls). `SamplingParams.stop` strings end a row once its decoded tail holds one.

Run: `HFEngine(model, tokenizer).generate([[ids...]], SamplingParams(n=4, temperature=0.6))`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from pasodoble.rollout.base import Completion, SamplingParams
from pasodoble.rollout.decode_logprobs import SampledLogprobs
from pasodoble.rollout.decode_loop import StopStrings, decode
from pasodoble.rollout.sampler import InverseCdfSampler
from pasodoble.update import fast_paths
from pasodoble.update.logprobs import logprobs
from pasodoble.update.precision import autocast
from pasodoble.update.prefix_attention import PREFIX_AWARE, SharedPrefix
from pasodoble.update.shared_prefix import (
    can_share_prompts,
    distinct_prompts,
    gather_cache,
    quiet_cache_rename,
)


def _eos_ids(model: torch.nn.Module, tokenizer) -> list[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer has no eos token and the model's generation config names none")
    return ids


@contextlib.contextmanager
def _bare_generation_config(model: torch.nn.Module):
    """Hide the checkpoint's generation_config for one call, so none of its fields fills an unset one."""
    saved = getattr(model, "generation_config", None)
    if saved is None:
        yield
        return
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved


class _FinishedCounter(StoppingCriteria):
    """Never stops generation; reports how many more rows have produced an EOS since the last step."""

    def __init__(self, width: int, eos_ids: list[int], report: Callable[[int], None]):
        self.width, self.report, self.done = width, report, None
        self.eos = torch.tensor(eos_ids)

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        finished = torch.isin(input_ids[:, self.width :], self.eos.to(input_ids.device)).any(dim=1)  # (B,)
        count = int(finished.sum())
        if count != (self.done or 0):
            self.report(count - (self.done or 0))
            self.done = count
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class _StopStrings(StoppingCriteria):
    """`generate`'s view of `decode_loop.StopStrings`: ends a row once the decoded tail of its completion holds a stop
    string; `ended[row]` is its length then."""

    def __init__(self, width: int, stops: tuple[str, ...], tokenizer):
        self.width, self.check = width, StopStrings(stops, tokenizer)
        self.ended: dict[int, int] = {}

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        length = input_ids.shape[1] - self.width
        first = max(self.width, input_ids.shape[1] - self.check.tail)
        hits = self.check(input_ids[:, first:].tolist())
        for row, hit in enumerate(hits):
            if hit and row not in self.ended:
                self.ended[row] = length
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        done[list(self.ended)] = True
        return done.to(input_ids.device)


class HFEngine:
    """`RolloutEngine` over `model.generate` (see module docstring)."""

    copies_weights = False  # samples from the live module

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        batch_size: int = 64,
        logprob_batch_size: int = 16,
        autocast_dtype: torch.dtype | None = None,
        rescore: bool = False,
        share_prefill: bool = True,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.logprob_batch_size = logprob_batch_size
        self.autocast_dtype = autocast_dtype  # None: run in the weights' own dtype
        self.rescore = rescore  # True: a forward pass re-scores the samples; False: decode-step log-probs
        self.share_prefill = share_prefill  # True: a prompt's samples share one prefill
        self.eos_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]

    def update_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # generation reads the live weights

    def close(self) -> None:
        """Nothing to release: the engine holds only the role's own module."""

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        on_batch: Callable[[int, list[Completion]], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        flat = [list(p) for p in prompt_ids for _ in range(sampling.n)]
        if any(len(p) == 0 for p in flat):
            raise ValueError("HFEngine.generate got an empty prompt; every prompt needs at least one token")
        out: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        try:
            with (
                torch.random.fork_rng(devices=[]),
                torch.no_grad(),
                autocast(device, self.autocast_dtype),
                _bare_generation_config(self.model),
                fast_paths.reuse_transposes(),  # the weights are fixed for the call: narrow layers transpose theirs once
            ):
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                for start in range(0, len(flat), self.batch_size):
                    batch = self._generate_batch(flat[start : start + self.batch_size], sampling, on_progress)
                    out.extend(batch)
                    if on_batch is not None:  # must not draw from torch's RNG: the next batch samples from it
                        on_batch(start, batch)
        finally:
            self.model.train(was_training)
        return [out[i * sampling.n : (i + 1) * sampling.n] for i in range(len(prompt_ids))]

    def _generate_batch(
        self, prompts: list[list[int]], sampling: SamplingParams, on_progress=None
    ) -> list[Completion]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=device)
        prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        sampler = None
        if sampling.temperature != 0:
            sampler = InverseCdfSampler(
                sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p
            )
        own_loop = can_share_prompts(self.model)
        prefill = self._shared_prefill(prompts, input_ids, prompt_mask) if self.share_prefill else None
        cache = prefix = None
        if prefill is not None and own_loop and self.model.config._attn_implementation in PREFIX_AWARE:
            prefix = SharedPrefix(*prefill)  # decode steps read each prompt's columns once for its samples
        elif prefill is not None:
            cache, _, rows = prefill
            gather_cache(cache, rows)  # (U, ...) -> (B, ...)
        if own_loop:
            completion, logps, lengths, finish = self._decode(
                input_ids, prompt_mask, cache, sampling, sampler, on_progress, prefix
            )  # (B, C), (B, C)
        else:
            completion, logps, lengths, finish = self._generate_with_hf(
                input_ids, prompt_mask, cache, sampling, sampler, on_progress
            )  # (B, C), (B, C) or None
        if logps is None or self.rescore:
            comp_mask = (
                torch.arange(completion.shape[1], device=device)[None, :]
                < torch.tensor(lengths, device=device)[:, None]
            )
            mask = torch.cat([prompt_mask, comp_mask.long()], dim=1)
            sequences = torch.cat([input_ids, completion], dim=1)
            logps = self._logprobs(sequences, mask, sampling.temperature)[:, width:]  # (B, C)
        results = []
        for i, n in enumerate(lengths):
            ids = completion[i, :n].tolist()
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            results.append(Completion(text, ids, logps[i, :n].tolist(), finish[i]))
        return results

    def _decode(self, input_ids, prompt_mask, cache, sampling, sampler, on_progress, prefix=None):
        """The engine's own loop (`rollout.decode_loop`): ended rows stop costing decode steps."""
        done = decode(
            self.model,
            input_ids,
            prompt_mask,
            max_new_tokens=sampling.max_new_tokens,
            eos_ids=self.eos_ids,
            pad_id=self.pad_id,
            temperature=sampling.temperature,
            choose=sampler.draw_scaled if sampler is not None else lambda scaled, weights: scaled.argmax(-1),
            cache=cache,
            prefix=prefix,
            stop_strings=StopStrings(sampling.stop, self.tokenizer) if sampling.stop else None,
            on_ended=on_progress,
        )
        return done.tokens, done.logprobs, done.lengths, done.finish

    def _generate_with_hf(self, input_ids, prompt_mask, cache, sampling, sampler, on_progress):
        """`model.generate` for models whose cache the own loop does not handle (sliding windows, hybrids)."""
        width = input_ids.shape[1]
        # Sampling runs greedily over scores the sampler leaves one token in (`rollout.sampler`): no warper and no
        # top_k=50 default of transformers' own sampling path applies.
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
        )
        counter = None if on_progress is None else _FinishedCounter(width, self.eos_ids, on_progress)
        stopper = _StopStrings(width, sampling.stop, self.tokenizer) if sampling.stop else None
        criteria = [c for c in (counter, stopper) if c is not None]
        recorder = None if self.rescore else SampledLogprobs(sampling.temperature)
        processors = [p for p in (recorder, sampler) if p is not None]  # the recorder sees the raw scores
        with quiet_cache_rename():
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=prompt_mask,
                **({"past_key_values": cache} if cache is not None else {}),
                generation_config=config,
                logits_processor=LogitsProcessorList(processors) if processors else None,
                stopping_criteria=StoppingCriteriaList(criteria) if criteria else None,
                synced_gpus=False,  # never a per-token collective: sharded roles generate on gathered weights
            )
        completion = sequences[:, width:]  # (B, C)
        lengths, finish = [], []
        for i, row in enumerate(completion.tolist()):
            eos = next((j for j, t in enumerate(row) if t in self.eos_ids), None)
            ended = stopper.ended.get(i) if stopper else None  # a stop string ended it: padding follows
            n = len(row) if eos is None else eos + 1
            lengths.append(n if ended is None else min(n, ended))
            finish.append("length" if eos is None and ended is None else "stop")
        if counter is not None and input_ids.shape[0] > (counter.done or 0):  # rows out of budget end here
            on_progress(input_ids.shape[0] - (counter.done or 0))
        logps = recorder.finish(sequences, width) if recorder is not None else None  # (B, C)
        return completion, logps, lengths, finish

    def _shared_prefill(self, prompts: list[list[int]], input_ids: torch.Tensor, prompt_mask: torch.Tensor):
        """(cache, mask, rows): a KV cache of all but the last prompt column of each distinct prompt (U rows), their
        mask and each batch row's prompt; None when no two rows share a prompt (or the model's cache is not a plain
        full-attention one). Decoding then runs only the last column: n samples of a prompt cost one prefill."""
        unique, index = distinct_prompts(prompts)
        if len(unique) == len(prompts) or input_ids.shape[1] < 2 or not can_share_prompts(self.model):
            return None
        rows = [
            index.index(u) for u in range(len(unique))
        ]  # (U,) the first batch row of each distinct prompt
        mask = prompt_mask[rows, :-1]  # (U, W - 1)
        with quiet_cache_rename():
            cache = self.model(
                input_ids=input_ids[rows, :-1],
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                use_cache=True,
                logits_to_keep=1,
            ).past_key_values
        return cache, mask, torch.tensor(index, device=input_ids.device)

    def _logprobs(self, sequences: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
        chunks = []
        for s in range(0, sequences.shape[0], self.logprob_batch_size):
            sl = slice(s, s + self.logprob_batch_size)
            chunks.append(logprobs(self.model, sequences[sl], mask[sl], mask[sl], temperature=temperature))
        return torch.cat(chunks)
