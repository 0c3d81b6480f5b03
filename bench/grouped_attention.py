"""The update with grouped-query SDPA (`accel.grouped_attention`) against transformers' stock SDPA, paired.

What: one process pinned to one core with one thread loads the model twice as a Role (`tiny`: the vs_trl anchor;
`smollm2`: SmolLM2-135M-Instruct from the package cache), one switched back to stock SDPA, builds `--prompts` chat
prompts x `--samples` completions of random tokens (half at the budget, half shorter, seed 0), and for each round
times one `Role.update` of each on the same samples, alternating which goes first. It prints the CPU-seconds of
each (median and every round) and the paired ratio stock / grouped. Peak RSS is the process's (both share it).

Why: transformers repeats each key/value head per query head before SDPA whenever a mask is given; the project's
attention implementation skips that copy on the CPU. This measures what that buys, in the same process and run.

Run: `python bench/grouped_attention.py --model tiny --rounds 5 --cpu 1`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl import pinned_bench  # noqa: E402
from vs_trl_sides import peak_rss_mb  # noqa: E402


def measure(args) -> dict:
    import torch
    from vs_trl import model_dir, questions

    from pasodoble.roles.role import Role, RoleConfig, Sample
    from pasodoble.rollout import Completion

    torch.set_num_threads(1)
    texts = questions(args.prompts, 0)
    folder = model_dir(args.model, Path(args.out), texts)
    cfg = RoleConfig(
        model=str(folder), num_generations=args.samples, max_completion_length=args.new_tokens, device="cpu",
        lr=1e-6, micro_batch_tokens=args.micro_batch_tokens,
    )  # fmt: skip
    roles = {name: Role.from_pretrained("solver", cfg, folder) for name in ("grouped", "stock")}
    roles["stock"].model.set_attn_implementation("sdpa")
    role = roles["grouped"]
    rng, vocab = random.Random(0), role.model.config.vocab_size
    samples = []
    for text in texts:
        prompt = role.prompt_ids([{"role": "user", "content": text}])
        for _ in range(args.samples):
            n = args.new_tokens if rng.random() < 0.5 else rng.randint(1, args.new_tokens)
            samples.append(
                Sample(prompt, Completion("", [rng.randrange(3, vocab) for _ in range(n)], [0.0] * n, "stop"))
            )
    advantages = [rng.uniform(-1, 1) for _ in samples]
    for r in roles.values():  # warm-up
        r.update(samples, advantages)
    seconds = {"grouped": [], "stock": []}
    for k in range(args.rounds):
        for name in ("grouped", "stock") if k % 2 == 0 else ("stock", "grouped"):
            start = time.process_time()
            roles[name].update(samples, advantages)
            seconds[name].append(time.process_time() - start)
    peak_mb = peak_rss_mb()  # this process's own (VmHWM; see vs_trl_sides)
    return {
        "model": args.model, "samples": len(samples), "new_tokens": args.new_tokens,
        "micro_batch_tokens": args.micro_batch_tokens, "seconds": seconds, "peak_rss_mb": round(peak_mb),
    }  # fmt: skip


def report(record: dict) -> str:
    s = record["seconds"]
    med = {k: statistics.median(v) for k, v in s.items()}
    ratio = statistics.median(a / b for a, b in zip(s["stock"], s["grouped"]))
    return "\n".join(
        [
            f"update, grouped-query SDPA vs stock: {record['model']}, {record['samples']} samples, up to "
            f"{record['new_tokens']} tokens, micro_batch_tokens {record['micro_batch_tokens']}, "
            f"peak RSS {record['peak_rss_mb']} MB",
            "",
            "| grouped CPU-s | stock CPU-s | stock / grouped (paired median) |",
            "|---|---|---|",
            f"| {med['grouped']:.3f} {[round(x, 3) for x in s['grouped']]} "
            f"| {med['stock']:.3f} {[round(x, 3) for x in s['stock']]} | {ratio:.3f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("tiny", "smollm2"), default="tiny", help="default: tiny")
    ap.add_argument("--prompts", type=int, default=32, help="default: 32")
    ap.add_argument("--samples", type=int, default=8, help="completions per prompt (default: 8)")
    ap.add_argument("--new-tokens", type=int, default=48, help="completion budget (default: 48)")
    ap.add_argument(
        "--micro-batch-tokens", type=int, default=4096, help="the update's budget (default: 4096)"
    )
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds (default: 5)")
    ap.add_argument(
        "--out", default="bench-out/grouped_attention", help="folder for result.json and built models"
    )
    return pinned_bench(ap, argv, __file__, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())
