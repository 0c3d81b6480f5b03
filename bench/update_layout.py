"""The update's micro-batch layouts against each other on the same samples, paired in one process.

What: one process pinned to one core with one thread loads the model as a Role (`tiny`: the vs_trl anchor;
`smollm2`: SmolLM2-135M-Instruct from the package cache), samples one GRPO step's completions with it (`--prompts`
chat questions x `--samples`, up to `--new-tokens`, seed 0: real lengths, as `bench/vs_trl.py` makes them), and
for each round times one `Role.update` on those samples in each arm, the first arm of a round taking turns:

- `default`: the Role's choice (`Role.micro_batch_layout`: packed, `update.packed`, each prompt once and on the
  project's attention the whole micro-batch in one row, where its cost model
  prices that lower), the input embedding's backward adding its rows into the gradient in place
  (`update.embedding_grad`), the LM head's log-probs as one fused autograd node (`update.fused_head`), and the narrow
  linear layers' products on the project's kernel where `cpu_matmul: auto` puts them (`accel.narrow_matmul`);
- `blas_products`: the default with the narrow kernel off (those layers' products on torch's BLAS, MKL);
- `separate_layers`: the default with each of a block's layers on one input (q, k, v; gate, up) in its own kernel
  call, as before they shared one (`accel.narrow_matmul.InputGroup`);
- `separate_blocks`: the default with each decoder layer running its own modules, an autograd node each, as before
  the layer ran as one node (`accel.fused_block`);
- `gathered`: the default with the packed rows' attention through per-sample gathers, two kernel calls a layer,
  as before the kernel read the rows in place (`update.segment_attention.attends_in_place`);
- `sdpa`: the default with the compiled attention kernel off (`accel.train_attention`; SDPA for every call);
- `stock_layers`: the default with the compiled norm, rotary and activation kernels off (`accel.fused_layers`);
- `stock_head`: the same with the stock head expression (`head(h) / T`, `gather`, `logsumexp`);
- `cache`: the default without packed rows (each distinct prompt once through the KV cache, `update.shared_prefix`);
- `cache_stock`: that with the stock embedding backward and the stock head as well: the update before the three
  changes.

It prints the CPU-seconds of each arm (median and every round), the paired ratios to `default`, the layout the Role
chose, and the peak RSS of the process (all arms share it; read before the options below run).

Why: the changes are measured apart from generation and from TRL, on the same samples in the same run, which
the whole-step comparison's noise (±7-10% a phase) cannot resolve.

On a GPU (`--device cuda`, `--model qwen3-0.6b`: a random Qwen3-0.6B-size model from a config, as `bench/vs_trl.py
--device cuda` builds it): the role trains in bfloat16 autocast over float32 master weights, the times are wall-clock
seconds after a CUDA synchronise, and the record adds the peak GPU memory allocated. `--profile N` adds the N
costliest operators of one more update in the default arm (`torch.profiler`; self CUDA time on a GPU; on a CPU self
CPU time with the matrix products' FLOP rate, and their share of the time and rate against the matmul peak measured
after it, `bench/op_profile.py`), the view that places an update's time. `--micro-batch-tokens` replaces the `auto` budget.
On a CPU, `--product-rates N` lists the N costliest matrix-product shapes of one more update in the `blas_products`
arm (the products it times are torch's) with the rate each ran at there and alone, its operands in cache and from
memory (`bench/product_rates.py`). `--budgets LIST` times
the default arm again at each token budget of LIST (and the Role's own), paired rounds in the same process, the
first budget of a round taking turns: the update's time against its micro-batch size on the same samples.

Run: `python bench/update_layout.py --model smollm2 --prompts 16 --samples 4 --new-tokens 128 --rounds 3 --cpu 1`;
on a GPU: `python bench/update_layout.py --model qwen3-0.6b --device cuda --prompts 16 --samples 8 --new-tokens 256
--rounds 2 --profile 15`.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from op_profile import matmul_peak, op_profile, profile_table, summary_line  # noqa: E402
from product_rates import product_rates, rates_line, rates_table  # noqa: E402
from vs_trl import pinned_bench  # noqa: E402
from vs_trl_sides import device_clock, peak_rss_mb  # noqa: E402

ARMS = (
    "default",
    "blas_products",
    "separate_layers",
    "separate_blocks",
    "gathered",
    "sdpa",
    "stock_layers",
    "stock_head",
    "cache",
    "cache_stock",
)


@contextlib.contextmanager
def arm(role, name: str):
    """The Role as it runs in arm `name` (see module) for the duration."""
    from pasodoble.accel import fused_block, fused_layers, narrow_matmul, train_attention
    from pasodoble.roles import role as role_module
    from pasodoble.update import chunked_logprobs, segment_attention

    weight, rows_into_grad, can_fuse, in_place = (
        role.entry_weight,
        role_module.rows_into_grad,
        chunked_logprobs.can_fuse,
        segment_attention.attends_in_place,
    )
    kernels = {module: dict(module._state) for module in (train_attention, fused_layers, narrow_matmul)}
    off = {"sdpa": train_attention, "stock_layers": fused_layers, "blas_products": narrow_matmul}.get(name)
    if off is not None:
        off._state.update(lib=None, why="off (bench arm)")
    if name.startswith("cache"):
        role.entry_weight = None  # no cost model: the Role keeps the KV-cache layout
    if name == "cache_stock":
        role_module.rows_into_grad = lambda model: contextlib.nullcontext()
    if name in ("stock_head", "cache_stock"):
        chunked_logprobs.can_fuse = lambda head, states: False
    if name == "gathered":
        segment_attention.attends_in_place = lambda query, key, value: False
    if name == "separate_layers":
        narrow_matmul._grouping["on"] = False
    if name == "separate_blocks":
        fused_block._fusing["on"] = False
    try:
        yield
    finally:
        for module, state in kernels.items():
            module._state.clear()
            module._state.update(state)
        role.entry_weight, role_module.rows_into_grad, chunked_logprobs.can_fuse = (
            weight,
            rows_into_grad,
            can_fuse,
        )
        segment_attention.attends_in_place = in_place
        narrow_matmul._grouping["on"] = True
        fused_block._fusing["on"] = True


def token_budget(text: str) -> int | str | None:
    """--micro-batch-tokens: "auto", "none" (no token budget) or a positive number of tokens."""
    if text.isdigit() and int(text) > 0:
        return int(text)
    if text.lower() in ("auto", "none"):
        return "auto" if text.lower() == "auto" else None
    raise argparse.ArgumentTypeError(f"{text!r}: use auto, none or a positive number of tokens")


def budget_list(text: str) -> list[int]:
    """--budgets: comma-separated positive numbers of tokens."""
    try:
        budgets = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        budgets = []
    if not budgets or min(budgets) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use positive token counts separated by commas, e.g. 1024,2112"
        )
    return budgets


def budget_sweep(role, samples, advantages, budgets: list[int], rounds: int, tick) -> dict:
    """The default arm's update at each budget of `budgets` (the Role's own first): {budget: {"seconds": [...],
    "micro_batches": n}}, `rounds` paired rounds after one warm-up each, the first budget of a round taking turns."""
    own = role.micro_batch_tokens
    order = list(dict.fromkeys([own, *budgets]))
    sweep = {}
    try:
        for budget in order:
            role.micro_batch_tokens = budget
            role.update(samples, advantages)  # warm-up
            sweep[budget] = {"seconds": [], "micro_batches": len(role.micro_batch_layout(samples)[0])}
        for k in range(rounds):
            for budget in order[k % len(order) :] + order[: k % len(order)]:
                role.micro_batch_tokens = budget
                start = tick()
                role.update(samples, advantages)
                sweep[budget]["seconds"].append(tick() - start)
    finally:
        role.micro_batch_tokens = own
    return sweep


def budget_table(sweep: dict, clock_unit: str = "CPU-s") -> str:
    """Markdown: each budget's micro-batches and time, and its time over the first budget's (paired median)."""
    items = list(sweep.items())
    base = items[0][1]["seconds"]
    lines = [
        f"| micro_batch_tokens | micro-batches | {clock_unit} (median) | every round | over {items[0][0]} (paired median) |",
        "|---|---|---|---|---|",
    ]
    for budget, row in items:
        ratio = statistics.median(a / b for a, b in zip(row["seconds"], base))
        lines.append(
            f"| {budget} | {row['micro_batches']} | {statistics.median(row['seconds']):.3f} "
            f"| {[round(x, 3) for x in row['seconds']]} | {ratio:.3f} |"
        )
    return "\n".join(lines)


def gpu_profile(role, samples, advantages, top: int) -> str:
    """On a GPU: the `top` costliest operators of one default-arm update by self CUDA time, as torch prints them."""
    import torch
    from torch.profiler import ProfilerActivity

    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        role.update(samples, advantages)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=top)


def measure(args) -> dict:
    import torch
    from vs_trl import model_dir, questions

    from pasodoble.core.grpo import group_advantages
    from pasodoble.roles.role import Role, RoleConfig, Sample

    torch.set_num_threads(1)
    on_gpu = args.device != "cpu"
    tick = device_clock(args.device)
    texts = questions(args.prompts, 0)
    folder = model_dir(args.model, Path(args.out), texts)
    cfg = RoleConfig(
        model=str(folder), num_generations=args.samples, temperature=1.0, max_prompt_length=4096,
        max_completion_length=args.new_tokens, device=args.device, lr=1e-6,
        dtype=args.dtype or ("bfloat16" if on_gpu else "float32"), generation_batch_size=len(texts) * args.samples,
        micro_batch_tokens=args.micro_batch_tokens, logprob_chunk_tokens="auto",
    )  # fmt: skip
    role = Role.from_pretrained("solver", cfg, folder)
    prompts = [role.prompt_ids([{"role": "user", "content": t}]) for t in texts]
    samples, advantages = [], []
    for prompt, group in zip(prompts, role.generate(prompts, seed=0), strict=True):
        # any spread of rewards: the time does not depend on it
        advantages += group_advantages(torch.tensor([float(len(c.token_ids) % 3) for c in group])).tolist()
        samples += [Sample(prompt, c) for c in group]
    plan, packed = role.micro_batch_layout(samples)
    for name in ARMS:  # warm-up
        with arm(role, name):
            role.update(samples, advantages)
    seconds: dict[str, list[float]] = {name: [] for name in ARMS}
    for k in range(args.rounds):
        for name in ARMS[k % len(ARMS) :] + ARMS[: k % len(ARMS)]:
            with arm(role, name):
                start = tick()
                role.update(samples, advantages)
                seconds[name].append(tick() - start)
    peak_mb = peak_rss_mb()  # this process's own (VmHWM; see vs_trl_sides), before other budgets raise it
    record = {
        "model": args.model, "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "samples": len(samples), "new_tokens": args.new_tokens,
        "completion_tokens": sum(len(s.completion.token_ids) for s in samples),
        "dtype": cfg.dtype, "micro_batch_tokens": role.micro_batch_tokens, "micro_batches": len(plan),
        "packed": packed,
        "seconds": seconds, "peak_rss_mb": round(peak_mb),
    }  # fmt: skip
    if on_gpu:
        record["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
    if args.profile and on_gpu:
        record["profile"] = gpu_profile(role, samples, advantages, args.profile)
    elif args.profile:
        rows, products = op_profile(lambda: role.update(samples, advantages), args.profile)
        record.update(profile=rows, profile_products=products, matmul_peak_flops_per_s=matmul_peak())
    if args.budgets:  # JSON keys are strings; the first is the Role's own budget
        sweep = budget_sweep(role, samples, advantages, args.budgets, args.rounds, tick)
        record["budgets"] = {str(budget): row for budget, row in sweep.items()}
    if args.product_rates and not on_gpu:
        with arm(role, "blas_products"):  # torch's products, the ones a dispatch mode can time
            rows, summary = product_rates(lambda: role.update(samples, advantages), args.product_rates)
        record.update(product_rates=rows, product_rates_summary=summary)
        record.setdefault("matmul_peak_flops_per_s", matmul_peak())
    return record


def report(record: dict) -> str:
    s = record["seconds"]
    on_gpu = record.get("device", "cpu") != "cpu"
    gpu = f", peak GPU memory {record['peak_gpu_mb']} MB on the {record['device']}" if on_gpu else ""
    lines = [
        f"update layouts: {record['model']} ({record.get('dtype', 'float32')}), {record['samples']} samples, {record['completion_tokens']} completion "
        f"tokens, micro_batch_tokens {record['micro_batch_tokens']}, {record['micro_batches']} micro-batches, the "
        f"Role chose {'packed rows' if record['packed'] else 'the KV-cache layout'}; peak RSS {record['peak_rss_mb']} MB"
        + gpu,
        "",
        f"| arm | {'s' if on_gpu else 'CPU-s'} (median) | every round | arm / default (paired median) |",
        "|---|---|---|---|",
    ]
    for name in ARMS:
        ratio = statistics.median(a / b for a, b in zip(s[name], s["default"]))
        lines.append(
            f"| {name} | {statistics.median(s[name]):.3f} | {[round(x, 3) for x in s[name]]} | {ratio:.3f} |"
        )
    if isinstance(record.get("profile"), str):
        lines += ["", "one more update in the default arm, its costliest operators:", record["profile"]]
    elif record.get("profile"):
        lines += ["", "the default arm's update under torch.profiler, its costliest operators:", ""]
        lines += [profile_table(record["profile"]), ""]
        lines.append(summary_line(record["profile_products"], record["matmul_peak_flops_per_s"]))
    if record.get("budgets"):
        lines += ["", "the default arm at each micro-batch budget (the Role's own first):", ""]
        lines.append(budget_table(record["budgets"], "s" if on_gpu else "CPU-s"))
    if record.get("product_rates"):
        peak = record["matmul_peak_flops_per_s"]
        lines += [
            "",
            f"the costliest matrix-product shapes of one more update in the blas_products arm (matmul peak "
            f"{peak / 1e9:.1f} GFLOP/s):",
            "",
        ]
        lines += [rates_table(record["product_rates"], peak), "", rates_line(record["product_rates_summary"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        choices=("tiny", "smollm2", "qwen3-0.6b", "qwen3-tiny"),
        default="tiny",
        help="default: tiny (qwen3-*: random models from a config, for --device cuda)",
    )
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        help="the role's compute dtype (default: float32 on a CPU, bfloat16 on a GPU)",
    )
    ap.add_argument(
        "--micro-batch-tokens",
        type=token_budget,
        default="auto",
        help="the role's micro_batch_tokens: auto (default), none, or tokens",
    )
    ap.add_argument(
        "--profile", type=int, default=0, help="also list the N costliest operators of one update"
    )
    ap.add_argument(
        "--product-rates",
        type=int,
        default=0,
        help="on a CPU, also list the N costliest matrix-product shapes of one update, each at its rate there and "
        "alone (default: 0, off)",
    )
    ap.add_argument(
        "--budgets",
        type=budget_list,
        default=None,
        help="also time the default arm at each of these micro-batch token budgets, e.g. 1024,2112,4224 (default: off)",
    )
    ap.add_argument("--prompts", type=int, default=32, help="default: 32")
    ap.add_argument("--samples", type=int, default=8, help="completions per prompt (default: 8)")
    ap.add_argument("--new-tokens", type=int, default=48, help="completion budget (default: 48)")
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds (default: 3)")
    ap.add_argument(
        "--out", default="bench-out/update_layout", help="folder for result.json and built models"
    )
    return pinned_bench(ap, argv, __file__, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())
