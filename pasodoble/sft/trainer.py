"""Supervised fine-tuning (the cold start before RL): loss on completion tokens only, HF checkpoints out.

Why: the paper warms both roles up with SFT on teacher outputs before dual-play; without it a base model rarely
writes a parseable `<problem>`/`\\boxed{}` and RL has nothing to reward. The same loop trains the tiny world's models
on CPU and a real model on one GPU.

How: each example `{"prompt", "completion"[, "system"]}` becomes the chat-template prompt (an optional system message,
the prompt as a user message, `add_generation_prompt=True`) followed by the completion and eos: the same prompt ids
generation uses. Labels are -100 on prompt and padding. Batches are random; `group_by_length` sorts within a window
of batches to waste less compute on padding, but in the tiny world that makes one-format batches and slowed learning
down. A batch runs in `micro_batch_size` pieces whose gradients accumulate, each weighted by its share of the
batch's completion tokens, so the loss is the token mean over the whole batch whatever the split. `bf16` runs the
forward pass under bfloat16 autocast while weights, gradients and AdamW states stay fp32 (the master weights);
`gradient_checkpointing` trades compute for activation memory. An eval set gives a token-mean eval loss before
training, every `eval_every` steps and at the end. AdamW, linear warm-up, cosine decay to 10%, gradient clipping.

Run: `pasodoble sft ...` (`cli.py`, which also resolves `tiny:` specs); in code `train_sft(model, tokenizer, examples,
cfg, eval_examples=...)`.

`packing` puts the examples of a batch into as few rows of `max_length` tokens as fit (first fit, longest first),
with a block-diagonal causal mask and positions restarting at 0 for each example, so the loss and gradients equal
the unpacked batch's (a test checks it); it saves the compute spent on padding. The mask is a boolean (rows, 1, W, W)
tensor that the eager and SDPA attention kernels take; flash-attention kernels want another packed form.

Several processes (`accelerate launch` or `torchrun`; the CLI then builds an `accelerate.Accelerator`): every process
draws the same batches and runs every world-th example of each, `Accelerator.prepare` wraps model and optimizer in
DDP, and the loss weights are scaled so that the averaged gradient is the token mean over the whole batch; two
processes give the one-process weights (a test checks it on CPU). LoRA comes with the project's adapters module.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from collections.abc import Sequence
from functools import partial

import torch

from pasodoble.errors import ConfigError, UserError
from pasodoble.progress import progress_bar
from pasodoble.sft.config import SFTConfig as SFTConfig  # re-exported: read without torch
from pasodoble.sft.examples import load_examples as load_examples  # re-exported, as split_examples
from pasodoble.sft.examples import split_examples as split_examples

IGNORE_INDEX = -100  # label value the HF loss skips
_SORT_WINDOW = 32  # batches whose examples are sorted by length together


def _messages(example: dict) -> list[dict[str, str]]:
    head = [{"role": "system", "content": example["system"]}] if example.get("system") else []
    return head + [{"role": "user", "content": example["prompt"]}]


def encode_examples(
    tokenizer, examples: Sequence[dict], max_length: int
) -> tuple[list[list[int]], list[int], int]:
    """Token ids per example, the prompt length of each, and how many were truncated to `max_length`."""
    prompts = tokenizer.apply_chat_template(
        [_messages(ex) for ex in examples],
        tokenize=False,
        add_generation_prompt=True,
    )
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer([ex["completion"] for ex in examples], add_special_tokens=False)["input_ids"]
    sequences, prompt_lens, truncated = [], [], 0
    for p, c in zip(prompt_ids, completion_ids):
        ids = p + c + [tokenizer.eos_token_id]
        if len(ids) > max_length:
            truncated += 1
            ids = ids[:max_length]
        sequences.append(ids)
        prompt_lens.append(len(p))
    return sequences, prompt_lens, truncated


def batch_order(
    lengths: list[int], batch_size: int, rng: random.Random, *, group: bool = False
) -> list[list[int]]:
    """One epoch of batches (lists of example indices) in random order; `group`: similar lengths in a batch."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if not group:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches = []
    window = batch_size * _SORT_WINDOW
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(sequences: list[list[int]], prompt_lens: list[int], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 on prompt and padding)."""
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (B, T)
    labels = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)  # (B, T)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)  # (B, T)
    for row, (ids, plen) in enumerate(zip(sequences, prompt_lens)):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, plen : len(ids)] = torch.tensor(ids[plen:])
        attention[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def lr_at(step: int, config: SFTConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
    return config.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def _batches(lengths: list[int], config: SFTConfig):
    """Endless stream of index batches, epoch after epoch."""
    rng = random.Random(f"sft/{config.seed}")
    while True:
        yield from batch_order(lengths, config.batch_size, rng, group=config.group_by_length)


def pack_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices grouped into rows of at most `capacity` tokens (first fit, longest first); order kept in a row."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = next((r for r, free in enumerate(room) if free >= lengths[i]), None)
        if r is None:
            rows.append([])
            room.append(capacity)
            r = len(rows) - 1
        rows[r].append(i)
        room[r] -= lengths[i]
    return [sorted(row) for row in rows]


def collate_packed(
    sequences: list[list[int]], prompt_lens: list[int], pad_id: int, capacity: int
) -> dict[str, torch.Tensor]:
    """Several examples per row: a block-diagonal causal mask keeps each example to itself, positions restart at 0.

    Labels are -100 on prompts and padding; since every example opens with prompt tokens, the one prediction across
    a boundary (the last token of one example predicting the first of the next) is never a label.
    """
    rows = pack_rows([len(s) for s in sequences], capacity)
    width = max(sum(len(sequences[i]) for i in row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (R, W)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)  # (R, W)
    positions = torch.zeros((len(rows), width), dtype=torch.long)  # (R, W)
    segment = torch.arange(width).repeat(len(rows), 1) + len(
        sequences
    )  # (R, W); padding: one segment per token
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            ids, end = sequences[i], start + len(sequences[i])
            input_ids[r, start:end] = torch.tensor(ids)
            labels[r, start + prompt_lens[i] : end] = torch.tensor(ids[prompt_lens[i] :])
            positions[r, start:end] = torch.arange(len(ids))
            segment[r, start:end] = i
            start = end
    causal = torch.tril(torch.ones(width, width, dtype=torch.bool))
    mask = (segment[:, :, None] == segment[:, None, :]) & causal  # (R, W, W)
    return {
        "input_ids": input_ids,
        "attention_mask": mask[:, None],
        "position_ids": positions,
        "labels": labels,
    }


class _Encoded:
    """Token ids and prompt lengths of a set of examples."""

    def __init__(self, tokenizer, examples, max_length: int, packing: bool = False):
        self.sequences, self.prompt_lens, self.truncated = encode_examples(tokenizer, examples, max_length)
        self.pad_id, self.max_length, self.packing = tokenizer.pad_token_id, max_length, packing

    def batch(self, idx: list[int], device) -> dict[str, torch.Tensor]:
        sequences, prompt_lens = [self.sequences[i] for i in idx], [self.prompt_lens[i] for i in idx]
        if self.packing:
            batch = collate_packed(sequences, prompt_lens, self.pad_id, self.max_length)
        else:
            batch = collate(sequences, prompt_lens, self.pad_id)
        return {k: v.to(device) for k, v in batch.items()}


def _label_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Tokens the shifted causal-LM loss averages over."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


class _Shard:
    """This process's share of each batch under `accelerate launch` / `torchrun` (every process draws the same
    batches and takes every world-th example); one process when `accelerator` is None."""

    def __init__(self, accelerator=None):
        self.acc = accelerator
        self.rank = accelerator.process_index if accelerator is not None else 0
        self.world = accelerator.num_processes if accelerator is not None else 1

    def take(self, idx: list[int]) -> list[int]:
        return idx[self.rank :: self.world]

    def sum(self, *values: float) -> list[float]:
        """Each value summed over processes."""
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.acc.device)
        return self.acc.reduce(t, reduction="sum").tolist()

    def backward(self, loss: torch.Tensor, net, *, sync: bool) -> None:
        if self.acc is None:
            loss.backward()
            return
        with contextlib.nullcontext() if sync else self.acc.no_sync(net):
            self.acc.backward(loss)

    def clip(self, params, max_norm: float) -> None:
        if self.acc is None:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:
            self.acc.clip_grad_norm_(params, max_norm)


def _step(
    net, data: _Encoded, idx: list[int], config: SFTConfig, device, autocast, shard
) -> tuple[float, int]:
    """Forward and backward over this process's part of `idx` in micro-batches; the loss is the token mean over
    the whole batch (of every process: gradient averaging over processes is undone by the factor `world`)."""
    local = shard.take(idx)
    micro = config.micro_batch_size or len(local)
    chunks = [data.batch(local[i : i + micro], device) for i in range(0, len(local), micro)]
    (total,) = shard.sum(sum(_label_tokens(b) for b in chunks))
    loss_sum = 0.0
    for k, batch in enumerate(chunks):
        weight = 1.0 if len(chunks) == 1 and shard.world == 1 else _label_tokens(batch) / max(1, total)
        with autocast():
            loss = net(**batch).loss
        shard.backward(loss * (weight * shard.world), net, sync=k == len(chunks) - 1)
        loss_sum += loss.item() * weight
    (loss_sum,) = shard.sum(loss_sum)
    return loss_sum, sum(len(data.sequences[i]) for i in idx)


@torch.no_grad()
def eval_loss(net, data: _Encoded, config: SFTConfig, device, autocast, shard=None) -> float:
    """Token-mean completion loss over every example of `data` (shared out among processes)."""
    shard = shard or _Shard()
    was_training = net.training
    net.eval()
    micro = config.micro_batch_size or config.batch_size
    local = shard.take(list(range(len(data.sequences))))
    loss_sum, tokens = 0.0, 0
    for start in range(0, len(local), micro):
        batch = data.batch(local[start : start + micro], device)
        with autocast():
            loss = net(**batch).loss
        n = _label_tokens(batch)
        loss_sum, tokens = loss_sum + loss.item() * n, tokens + n
    net.train(was_training)
    loss_sum, tokens = shard.sum(loss_sum, tokens)
    return loss_sum / max(1, tokens)


def train_sft(
    model,
    tokenizer,
    examples,
    config: SFTConfig,
    *,
    eval_examples=None,
    tracker=None,
    progress=True,
    role="model",
    accelerator=None,
    stop=None,
) -> dict:
    """Fine-tune `model` in place on `examples`; log `<role>/sft/*` rows to `tracker`; return summary metrics.

    `stop(step)`, when given, is called after each optimizer step (`step` counts from 1); True ends training there
    (the tiny world's warm-up stops this way, `world/select.py`); its `rule` attribute, when it has one, is the rule
    in words, shown on the progress bar and in the line that says where training stopped.

    With `eval_examples`, `<role>/sft/eval_loss` is logged before training, every `eval_every` steps and at the end.
    With an `accelerate.Accelerator` of several processes, each process runs its share of every batch (see _Shard).
    """
    config.validate()
    if not examples:
        raise UserError("SFT data is empty: give at least one {'prompt', 'completion'} example")
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    device = next(model.parameters()).device
    if config.gradient_checkpointing:
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()  # transformers 5 renamed it
        model.config.use_cache = False
    autocast = partial(torch.autocast, device.type, dtype=torch.bfloat16, enabled=config.bf16)
    max_length = config.max_length or model.config.max_position_embeddings
    data = _Encoded(tokenizer, examples, max_length, config.packing)
    held = _Encoded(tokenizer, eval_examples, max_length, config.packing) if eval_examples else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    shard, net = _Shard(accelerator), model
    if accelerator is not None:
        if config.batch_size < shard.world:
            raise ConfigError("sft.batch_size", f"must be at least the number of processes ({shard.world})")
        net, optimizer = accelerator.prepare(model, optimizer)
    net.train()
    batches = _batches([len(s) for s in data.sequences], config)
    evals: list[float] = []

    def evaluate(step: int) -> None:
        evals.append(eval_loss(net, held, config, device, autocast, shard))
        if tracker is not None:
            tracker.log({f"{role}/sft/eval_loss": evals[-1]}, step=step)

    if held is not None:
        evaluate(0)
    window_loss, first_loss, tokens_total, start = 0.0, None, 0, time.perf_counter()
    rule = getattr(stop, "rule", None)
    desc = f"SFT {role}" + (f" (at most {config.max_steps} steps; stops early when {rule})" if rule else "")
    bar = progress_bar(range(config.max_steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        optimizer.zero_grad(set_to_none=True)
        loss, n_tokens = _step(net, data, next(batches), config, device, autocast, shard)
        shard.clip(model.parameters(), config.max_grad_norm)
        optimizer.step()
        window_loss, tokens_total = window_loss + loss, tokens_total + n_tokens
        if (step + 1) % config.log_every == 0 or step + 1 == config.max_steps:
            mean_loss = window_loss / ((step % config.log_every) + 1)
            first_loss = mean_loss if first_loss is None else first_loss
            seconds = time.perf_counter() - start
            row = {
                f"{role}/sft/loss": mean_loss,
                f"{role}/sft/lr": lr_at(step, config),
                f"{role}/sft/tokens_per_s": tokens_total / seconds,
            }
            if tracker is not None:
                tracker.log(row, step=step + 1)
            bar.set_postfix(loss=f"{mean_loss:.3f}")
            window_loss = 0.0
        stopping = stop is not None and stop(step + 1)
        last = stopping or step + 1 == config.max_steps
        if held is not None and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
            evaluate(step + 1)
        if stopping:
            bar.close()
            if progress:
                print(
                    f"SFT {role}: stopped at step {step + 1} of at most {config.max_steps}: {rule or 'stop rule met'}",
                    file=sys.stderr,
                )
            break
    model.eval()
    seconds = time.perf_counter() - start
    summary = {
        f"{role}/sft/loss_first": first_loss,
        f"{role}/sft/loss_last": mean_loss,
        f"{role}/sft/steps": step + 1,
        f"{role}/sft/seconds": seconds,
        f"{role}/sft/tokens_per_s": tokens_total / seconds,
        f"{role}/sft/truncated": data.truncated,
        f"{role}/sft/examples": len(examples),
    }
    if evals:
        summary.update({f"{role}/sft/eval_loss_first": evals[0], f"{role}/sft/eval_loss_last": evals[-1]})
    return summary
