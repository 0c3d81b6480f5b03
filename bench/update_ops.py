"""Operators an update launches: the Role's update at several token budgets against a plain padded update.

What: builds a Qwen3 of the Qwen3-0.6B depth and layout (28 layers, grouped-query attention) but narrow width and a
small vocabulary (hidden 64, so that a CPU runs it in seconds), samples one GRPO step with it as a Role (`--prompts`
x `--samples`, up to `--new-tokens`, `--seed`), and counts the aten operator calls (`torch.profiler`) of one
`Role.update` on those samples per `--budgets` entry (`micro_batch_tokens`; `logprob_chunk_tokens` fixed by
`--chunk`), and of a plain update on the same samples: micro-batches of `--micro-batch` padded sequences, one forward
each, log-softmax, gather, backward, then gradient clipping and one AdamW step (the loop TRL's `GRPOTrainer` runs,
written out here, not TRL itself). Prints a table of micro-batches, operator calls and CPU-seconds per arm.

Why: on a GPU a small model's update is bound by the operators it launches (each costs microseconds of dispatch
whatever its size), so the count is the figure that carries over from this CPU, where the times do not. On one
H200 the update took 3.90 s in the project against 1.20 s in TRL (docs/PERFORMANCE.md); this bench counts 499,850
operators against 174,303 at that run's budget (3,008 tokens), seed 0.

    python bench/update_ops.py                                  # 16 x 8, 256 new tokens, budgets 3008,6016,12032
    python bench/update_ops.py --prompts 4 --new-tokens 16 --budgets 256,1024 --micro-batch 8   # seconds
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

NARROW = dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=32
)


def count_ops(fn) -> tuple[int, float]:
    """(aten operator calls, CPU-seconds) of one call of `fn`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.process_time()
        fn()
        seconds = time.process_time() - start
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")), seconds


def plain_update(model, samples, pad_id: int, micro_batch: int):
    """One update the plain way: padded micro-batches, one forward each, full logits, AdamW (see module)."""
    import torch

    from pasodoble.roles.role import collate

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def run() -> None:
        for lo in range(0, len(samples), micro_batch):
            batch = collate(samples[lo : lo + micro_batch], pad_id)
            ids = batch["input_ids"]
            logits = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits[:, :-1].float()
            logps = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -(logps * batch["completion_mask"][:, 1:]).sum() / max(len(samples), 1)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


def measure(args) -> dict:
    import torch
    from gpu_check import QWEN3_0_6B, build_model_dir
    from vs_trl import questions

    from pasodoble.core.grpo import group_advantages
    from pasodoble.roles.role import Role, RoleConfig, Sample

    torch.set_num_threads(1)
    folder, params = build_model_dir(
        Path(tempfile.mkdtemp(prefix="update-ops-")),
        {**QWEN3_0_6B, **NARROW, "vocab_size": 4096},
        0,
        torch.float32,
    )
    texts = questions(args.prompts, args.seed)
    cfg = RoleConfig(
        model=str(folder), num_generations=args.samples, temperature=1.0, max_prompt_length=4096,
        max_completion_length=args.new_tokens, device="cpu", lr=1e-6, micro_batch_size=args.micro_batch,
        generation_batch_size=len(texts) * args.samples, micro_batch_tokens=args.budgets[0],
        logprob_chunk_tokens=args.chunk,
    )  # fmt: skip
    role = Role.from_pretrained("solver", cfg, folder)
    prompts = [role.prompt_ids([{"role": "user", "content": t}]) for t in texts]
    samples, advantages = [], []  # one step's samples, shared by every arm
    for prompt, group in zip(prompts, role.generate(prompts, seed=args.seed), strict=True):
        advantages += group_advantages(torch.tensor([float(len(c.token_ids) % 3) for c in group])).tolist()
        samples += [Sample(prompt, c) for c in group]
    rows = []
    for budget in args.budgets:
        role.micro_batch_tokens = budget  # what `micro_batch_tokens: budget` resolves to
        plan, packed = role.micro_batch_layout(samples)
        role.update(samples, advantages)  # warm-up
        ops, seconds = count_ops(functools.partial(role.update, samples, advantages))
        layout = "packed rows" if packed else "KV-cache prompts"
        rows.append(
            {
                "arm": f"project, {budget} tokens ({layout})",
                "micro_batches": len(plan),
                "ops": ops,
                "cpu_s": seconds,
            }
        )
    run = plain_update(role.model, samples, role.tokenizer.pad_token_id, args.micro_batch)
    run()  # warm-up
    ops, seconds = count_ops(run)
    micro_batches = -(-len(samples) // args.micro_batch)
    rows.append(
        {
            "arm": f"plain, {args.micro_batch} padded sequences",
            "micro_batches": micro_batches,
            "ops": ops,
            "cpu_s": seconds,
        }
    )
    return {
        "params": params, "samples": len(samples), "new_tokens": args.new_tokens,
        "completion_tokens": sum(len(s.completion.token_ids) for s in samples), "seed": args.seed, "rows": rows,
    }  # fmt: skip


def report(record: dict) -> str:
    base = record["rows"][-1]["ops"]
    lines = [
        f"update operators: a 28-layer narrow Qwen3 ({record['params'] / 1e6:.1f}M parameters), {record['samples']} "
        f"samples, {record['completion_tokens']} completion tokens, seed {record.get('seed', 0)}",
        "",
        "| arm | micro-batches | aten operator calls | / plain | CPU-s |",
        "|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        lines.append(
            f"| {r['arm']} | {r['micro_batches']} | {r['ops']:,} | {r['ops'] / base:.2f} | {r['cpu_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="default: 16")
    ap.add_argument("--samples", type=int, default=8, help="completions per prompt (default: 8)")
    ap.add_argument("--new-tokens", type=int, default=256, help="completion budget (default: 256)")
    ap.add_argument(
        "--micro-batch", type=int, default=16, help="sequences per plain micro-batch (default: 16)"
    )
    ap.add_argument("--chunk", type=int, default=768, help="the Role's logprob_chunk_tokens (default: 768)")
    ap.add_argument(
        "--budgets", default="3008,6016,12032", help="the Role's micro_batch_tokens, comma-separated"
    )
    ap.add_argument("--seed", type=int, default=0, help="questions and sampling seed (default: 0)")
    ap.add_argument("--out", type=Path, default=None, help="also write the record here (JSON)")
    args = ap.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    if not args.budgets or min(args.budgets) < 1:
        ap.error("--budgets: one or more positive token counts, comma-separated")
    record = measure(args)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1))
    print(report(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
