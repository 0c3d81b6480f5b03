"""Supervised fine-tuning (the cold start before RL): loss on completion tokens only, HF checkpoints out.

Why: the paper warms both roles up with SFT on teacher outputs before dual-play; without it a base model rarely
writes a parseable `<problem>`/`\\boxed{}` and RL has nothing to reward. The same code trains the tiny world's models
on CPU and a real model on one GPU (for multi-GPU SFT use a full trainer such as TRL's `SFTTrainer`).

How: each example `{"prompt", "completion"}` becomes the chat-template prompt (the prompt as a user message,
`add_generation_prompt=True`) followed by the completion and eos; the same prompt ids generation uses. Labels are
-100 on prompt and padding. Batches are random; `group_by_length` sorts within a window of batches to waste less
compute on padding, but in the tiny world that makes one-format batches and slowed learning down. AdamW, linear warm-up, cosine decay to 10%, gradient clipping.

Run: `pasodoble sft ...` (see `cli.py`, which resolves `tiny:` specs); in code, `train_sft(model, tokenizer, examples, cfg)`.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from pasodoble.errors import ConfigError, UserError

IGNORE_INDEX = -100  # label value the HF loss skips
_SORT_WINDOW = 32  # batches whose examples are sorted by length together


@dataclass
class SFTConfig:
    max_steps: int = 800  # optimizer steps
    batch_size: int = (
        32  # examples per step (small batches, more updates: the tiny models learn faster per token)
    )
    lr: float = 5e-3  # peak AdamW learning rate (tiny models take a large one; use ~1e-5 for 1B+ models)
    warmup_steps: int = 30  # linear warm-up steps
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping
    group_by_length: bool = False  # batch examples of similar length (less padding, but one-format batches)
    max_length: int | None = None  # longest prompt + completion in tokens (None: the model's max positions)
    seed: int = 0  # data order
    num_threads: int | None = (
        1  # torch CPU threads; 1 because 2 threads ran 15x slower on a busy 2-core machine
    )
    log_every: int = 10  # steps between logged loss rows
    roles: str = "joint"  # warm-up: "joint" = one model on both roles' data; "separate" = one model per role

    def validate(self) -> None:
        for name in ("max_steps", "batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"sft.{name}", "must be at least 1")
        if self.lr <= 0:
            raise ConfigError("sft.lr", "must be positive, e.g. 3e-3 for tiny models")
        if self.roles not in ("joint", "separate"):
            raise ConfigError("sft.roles", f"must be 'joint' or 'separate', got {self.roles!r}")


def encode_examples(
    tokenizer, examples: Sequence[dict], max_length: int
) -> tuple[list[list[int]], list[int], int]:
    """Token ids per example, the prompt length of each, and how many were truncated to `max_length`."""
    prompts = tokenizer.apply_chat_template(
        [[{"role": "user", "content": ex["prompt"]}] for ex in examples],
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


def train_sft(
    model, tokenizer, examples, config: SFTConfig, *, tracker=None, progress=True, role="model"
) -> dict:
    """Fine-tune `model` in place on `examples`; log `<role>/sft/*` rows to `tracker`; return summary metrics."""
    config.validate()
    if not examples:
        raise UserError("SFT data is empty: give at least one {'prompt', 'completion'} example")
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    max_length = config.max_length or model.config.max_position_embeddings
    sequences, prompt_lens, truncated = encode_examples(tokenizer, examples, max_length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    model.train()
    batches = _batches([len(s) for s in sequences], config)
    window_loss, first_loss, tokens_total, start = 0.0, None, 0, time.perf_counter()
    bar = tqdm(range(config.max_steps), desc=f"SFT {role}", disable=not progress, leave=False)
    for step in bar:
        idx = next(batches)
        batch = collate([sequences[i] for i in idx], [prompt_lens[i] for i in idx], tokenizer.pad_token_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        n_tokens = int(batch["attention_mask"].sum())
        window_loss, tokens_total = window_loss + loss.item(), tokens_total + n_tokens
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
    model.eval()
    seconds = time.perf_counter() - start
    return {
        f"{role}/sft/loss_first": first_loss,
        f"{role}/sft/loss_last": mean_loss,
        f"{role}/sft/steps": config.max_steps,
        f"{role}/sft/seconds": seconds,
        f"{role}/sft/tokens_per_s": tokens_total / seconds,
        f"{role}/sft/truncated": truncated,
        f"{role}/sft/examples": len(examples),
    }


def load_examples(path: Path) -> list[dict]:
    """`{"prompt", "completion"}` rows of a JSONL file; a bad row is a one-line error naming file and line."""
    if not path.is_file():
        raise UserError(f"--data {path}: file not found")
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{number}: not valid JSON ({e.msg})") from None
        if not (
            isinstance(row, dict)
            and isinstance(row.get("prompt"), str)
            and isinstance(row.get("completion"), str)
        ):
            raise UserError(f"{path}:{number}: each row needs string fields 'prompt' and 'completion'")
        examples.append({"prompt": row["prompt"], "completion": row["completion"]})
    return examples
