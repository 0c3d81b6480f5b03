"""Check: does a bfloat16 (or float16) role learn like a float32 one? Same start, same samples, same updates.

Builds two roles from one model folder (`--model`; default: a tiny random Qwen3 written to a temporary folder),
one with `dtype=float32` and one with `--dtype`, samples one batch with the float32 role, then runs `--updates`
GRPO updates of each on that batch at `--lr`. Prints the share of parameter entries each role moved, and both loss
curves with their largest gap relative to the float32 loss's fall. Not a timing benchmark; runs on CPU or CUDA.

    python bench/mixed_precision.py                                   # tiny random Qwen3, lr 1e-6 and 1e-5
    python bench/mixed_precision.py --model tiny:solver               # the tiny world's Solver (built on first use)
    python bench/mixed_precision.py --model PATH --device cuda --lr 1e-6 --completion 256
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pasodoble.roles.role import Role, RoleConfig, Sample

PROMPTS = ("What is 1+1?", "What is 2+3?", "What is 7*8?", "What is 9-4?")


def build(model: str, dtype: str, lr: float, args) -> Role:
    cfg = RoleConfig(
        model=model,
        num_generations=4,
        temperature=1.0,
        max_completion_length=args.completion,
        lr=lr,
        micro_batch_size=8,
        max_grad_norm=None,
        dtype=dtype,
        device=args.device,
    )
    return Role.from_pretrained("solver", cfg, model)


def run(model: str, lr: float, args) -> None:
    fp32, low = build(model, "float32", lr, args), build(model, args.dtype, lr, args)
    ids = [fp32.prompt_ids([{"role": "user", "content": p}]) for p in PROMPTS]
    samples = [Sample(ids[i], c) for i, group in enumerate(fp32.generate(ids, seed=0)) for c in group]
    advantages = [(-1.0) ** k * (1 + k % 3) / 2 for k in range(len(samples))]
    curves, moved = {}, {}
    for name, role in (("float32", fp32), (args.dtype, low)):
        before = [p.detach().float().clone() for p in role.model.parameters()]
        curves[name] = [role.update(samples, advantages)["loss"] for _ in range(args.updates)]
        after = [p.detach().float() for p in role.model.parameters()]
        changed = sum(int((a != b).sum()) for a, b in zip(before, after))
        moved[name] = (changed, sum(a.numel() for a in before))
    fall = curves["float32"][0] - curves["float32"][-1]
    gap = max(abs(a - b) for a, b in zip(curves["float32"], curves[args.dtype]))
    print(f"lr {lr:g}, {args.updates} updates on {len(samples)} samples of {model}")
    for name, (changed, total) in moved.items():
        curve = " ".join(f"{x:.6f}" for x in curves[name])
        print(f"  {name:9s} moved {changed}/{total} ({100 * changed / total:.2f}%)  loss {curve}")
    print(f"  largest loss gap {gap:.2e}; float32 fall {fall:.2e} ({100 * gap / abs(fall):.1f}% of it)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="Hugging Face model folder or tiny:solver (default: a tiny random Qwen3)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--lr", type=float, nargs="+", default=[1e-6, 1e-5])
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--completion", type=int, default=16, help="max_completion_length")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from tests.loop_helpers import save_tiny

            model = str(save_tiny(Path(tmp) / "tiny"))
        else:
            from pasodoble.sft.tiny import resolve_model

            model = resolve_model(model)
        for lr in args.lr:
            run(model, lr, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
