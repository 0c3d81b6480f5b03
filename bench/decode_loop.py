"""The Hugging Face engine's own decode loop against `model.generate` on the same batch (paired, interleaved).

What: one process pinned to one core with one thread loads the model (`tiny`: the vs_trl anchor; `smollm2`:
SmolLM2-135M-Instruct from the package cache) with the Role's attention (`use_grouped_attention`), builds
`--prompts` chat prompts x `--samples` rows, and for each round times three arms from the same seed and the same
shared-prompt prefill, each leading in turn: the engine's own loop (`rollout.decode_loop`, ended rows leaving the
step) over a cache with each prompt's columns copied per row ("own"), the same loop reading each prompt's columns
once for its rows (`update.prefix_attention`, "shared": what the engine runs), and `generate` (every row decoded until
the last one ends). It prints CPU-seconds per call (median and every round), tokens made, the decode row-steps of
each arm, and the ratios generate / own and own / shared. Peak RSS is the process's (the arms share it).

Why: the performance issue asks that finished sequences stop costing decode steps and that a question's samples
share its prompt; this measures what each buys against the path it replaced, in the same process and the same run.

Run: `python bench/decode_loop.py --model tiny --new-tokens 48,200 --rounds 4 --cpu 1`; `--context-words 150` puts a
passage before each question, as a Solver's prompt has.
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

ARMS = ("own", "shared", "generate")


def load(model: str, out: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vs_trl import SHAPES, model_dir, questions

    shape = SHAPES["tiny" if model == "tiny" else "smollm2"]
    texts = questions(shape.prompts, 0)
    folder = model_dir(model, out, texts)
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder), texts


def passage(words: int, seed: int) -> str:
    """About `words` words of seeded arithmetic facts, a stand-in for a corpus passage."""
    rng = random.Random(seed)
    facts = []
    while len(facts) * 4 < words:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        facts.append(f"{a} plus {b} is {a + b}.")
    return " ".join(facts)


def row_steps(model) -> list[int]:
    """Rows of every single-column forward pass (decode steps) from now on."""
    seen: list[int] = []

    def hook(_module, _args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] == 1:
            seen.append(ids.shape[0])

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def measure(args) -> dict:
    import torch

    from pasodoble.accel.grouped_attention import use_grouped_attention
    from pasodoble.rollout import HFEngine, SamplingParams
    from pasodoble.rollout.hf import InverseCdfSampler
    from pasodoble.update.prefix_attention import SharedPrefix
    from pasodoble.update.shared_prefix import gather_cache

    torch.set_num_threads(1)
    model, tokenizer, texts = load(args.model, Path(args.out))
    use_grouped_attention(model)  # as the Role loads it
    engine = HFEngine(model, tokenizer, batch_size=10**6)
    prompts = []
    for i, text in enumerate(texts[: args.prompts]):
        if args.context_words:  # a Solver-like prompt: a passage, then the question
            text = f"Passage: {passage(args.context_words, i)}\n\nQuestion: {text}"
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        prompts.append(list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids))
    flat = [p for p in prompts for _ in range(args.samples)]
    width = max(len(p) for p in flat)
    ids = torch.tensor([[engine.pad_id] * (width - len(p)) + p for p in flat])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in flat])
    steps = row_steps(model)
    results = {}
    for new in args.new_tokens:
        sampling = SamplingParams(n=args.samples, temperature=1.0, max_new_tokens=new, seed=0)
        rows = {name: [] for name in ARMS}
        for r in range(args.rounds):
            for name in ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]:  # each arm leads in turn
                sampler = InverseCdfSampler(1.0, top_k=None, top_p=1.0, min_p=None)
                torch.manual_seed(r)
                steps.clear()
                with torch.no_grad():
                    start = time.process_time()
                    prefill = engine._shared_prefill(flat, ids, mask)  # None: no two rows share a prompt
                    cache = prefix = None
                    if prefill is not None and name == "shared":
                        prefix = SharedPrefix(*prefill)
                    elif prefill is not None:
                        cache, _, index = prefill
                        gather_cache(cache, index)
                    if name == "generate":
                        out = engine._generate_with_hf(ids, mask, cache, sampling, sampler, None)
                    else:
                        out = engine._decode(ids, mask, cache, sampling, sampler, None, prefix)
                    cpu_s = time.process_time() - start
                rows[name].append({"cpu_s": cpu_s, "tokens": sum(out[2]), "row_steps": sum(steps)})
        results[str(new)] = rows
    peak_mb = peak_rss_mb()  # this process's own (VmHWM; see vs_trl_sides)
    return {
        "model": args.model,
        "rows": len(flat),
        "prompt_tokens": round(sum(len(p) for p in prompts) / len(prompts)),
        "results": results,
        "peak_rss_mb": round(peak_mb),
    }


def report(record: dict) -> str:
    lines = [
        f"decode loop vs generate: {record['model']}, {record['rows']} rows, prompts of "
        f"{record.get('prompt_tokens', '?')} tokens on average, peak RSS {record['peak_rss_mb']} MB",
        "",
        "| new tokens | own loop CPU-s | own loop, shared prompts CPU-s | generate CPU-s | generate / own "
        "| own / shared | tokens (own / shared / generate) | decode row-steps (own / shared / generate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for new, rows in record["results"].items():
        med = {k: statistics.median(x["cpu_s"] for x in v) for k, v in rows.items()}
        spread = {k: [round(x["cpu_s"], 2) for x in v] for k, v in rows.items()}
        tokens = " / ".join(f"{statistics.median(x['tokens'] for x in rows[k]):.0f}" for k in ARMS)
        steps = " / ".join(f"{statistics.median(x['row_steps'] for x in rows[k]):.0f}" for k in ARMS)
        times = " | ".join(f"{med[k]:.2f} {spread[k]}" for k in ARMS)
        lines.append(
            f"| {new} | {times} | {med['generate'] / med['own']:.2f} | {med['own'] / med['shared']:.2f} "
            f"| {tokens} | {steps} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("tiny", "smollm2"), default="tiny", help="default: tiny")
    ap.add_argument("--new-tokens", default="48,200", help="comma-separated budgets (default: 48,200)")
    ap.add_argument("--prompts", type=int, default=32, help="default: 32")
    ap.add_argument("--samples", type=int, default=8, help="rows per prompt (default: 8)")
    ap.add_argument("--rounds", type=int, default=4, help="paired rounds (default: 4)")
    ap.add_argument(
        "--context-words",
        type=int,
        default=0,
        help="put a passage of about this many words before each question, as a Solver prompt has (default: 0)",
    )
    ap.add_argument("--out", default="bench-out/decode_loop", help="folder for result.json and built models")

    def prepare(args):
        args.new_tokens = [int(x) for x in str(args.new_tokens).split(",")]

    return pinned_bench(ap, argv, __file__, measure, report, prepare)


if __name__ == "__main__":
    raise SystemExit(main())
