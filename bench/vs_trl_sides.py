"""One side of `bench/vs_trl.py`, in its own process: the project's GRPO step, TRL's, or the matmul peak.

What: `--side project` runs `warmup_steps` + 1 single-policy steps of the project (`Role.generate`, the reward,
the project's group advantages, `Role.update`); `--side trl` / `--side trl_defaults` run the same work through
TRL's `GRPOTrainer` (one optimizer step per generation batch); `--side peak` times a matmul loop (float32, or
`--dtype bfloat16`). Each
writes one JSON record: CPU-seconds (`time.process_time`) of the last step and of its phases, its prompt and
completion tokens, the parameters, the process's peak RSS and the library versions. With `device: cuda` in the spec
(`bench/vs_trl.py --device cuda`) the clocks are wall-clock seconds after a CUDA synchronise, both sides train in
bfloat16 autocast over float32 master weights (the project's `dtype: bfloat16`, TRL's `bf16=True`), the record adds
the peak GPU memory allocated, and `--side peak --device cuda` times a bfloat16 matmul instead. `dtype: bfloat16` on a
CPU (`bench/vs_trl.py --dtype bfloat16`) is the same autocast on one pinned core.

Why a file of its own: the TRL sides run in TRL's venv, which has torch, transformers and TRL but not the project,
so this module imports nothing beyond the standard library at the top; each side imports what it needs.

The work (`spec.json`, written by `bench/vs_trl.py`): a model folder, chat prompts (the next `prompts` of them per
step), `num_generations` samples each of up to `max_new_tokens`, temperature 1, no top-k/top-p, dr_grpo, beta 0,
one AdamW step at a constant lr, float32, micro-batches of `micro_batch` sequences. The reward is `reward()` below
on both sides. `trl` sets what the project's defaults fix (gradient checkpointing off, plain AdamW); `trl_defaults`
leaves those at TRL's defaults (gradient checkpointing on, its default optimizer), float32 all the same (TRL's bf16
default is a GPU setting). Run by hand: `python bench/vs_trl_sides.py --side peak --out peak.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

# this file runs as a script in the project's venv and in TRL's; vs_trl_stats is plain arithmetic that both import
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_trl_stats import causal_pairs

SIDES = ("project", "trl", "trl_defaults", "peak")


def reward(text: str) -> float:
    """A cheap, deterministic reward that differs between samples (so advantages are not all zero)."""
    return (sum(map(ord, text)) % 97) / 96


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion  # TRL's chat form


def peak_rss_mb() -> float:
    """This process's own peak resident memory: VmHWM, which starts afresh at exec. `ru_maxrss` keeps the parent's
    resident size at the fork through the exec, so a bench whose parent built a 2.4 GB model read that as every
    side's peak (seen on the GPU run); it is the fallback where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def memory_mb() -> dict:
    """This process's resident memory now (VmRSS), its anonymous part (RssAnon) and its peak so far (VmHWM), and
    the freed memory its allocator holds for reuse (`accel.host_memory.free_heap_bytes`), all in MB."""
    from pasodoble.accel.host_memory import free_heap_bytes

    fields = {"VmRSS:": "rss_mb", "RssAnon:": "anon_mb", "VmHWM:": "peak_mb"}
    out = {"heap_free_mb": free_heap_bytes() / 2**20}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            key = line.split(maxsplit=1)[0] if line else ""
            if key in fields:
                out[fields[key]] = int(line.split()[1]) / 1024  # kB
    return out


def _malloc() -> str:
    """The allocator this process runs on, from its mapped libraries, as `pasodoble.allocator.active` reads it: the
    TRL sides cannot import that module, since importing `pasodoble` sets oneDNN's cache sizes for the process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "tcmalloc" if "libtcmalloc" in maps else "jemalloc" if "libjemalloc" in maps else "system"


def _versions() -> dict:
    import torch
    import transformers

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "malloc": _malloc(),
    }
    try:
        import trl

        out["trl"] = trl.__version__
    except ImportError:
        pass
    return out


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)


def device_clock(device: str):
    """CPU-seconds on a CPU; on a GPU, wall-clock seconds read after the device finished its queued work."""
    if device == "cpu":
        return time.process_time
    import torch

    def wall() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()

    return wall


def _device_figures(device: str) -> dict:
    """What a record adds on a GPU: its name, the clock's kind and the peak memory torch allocated on it."""
    if device == "cpu":
        return {"device": "cpu", "clock": "cpu"}
    import torch

    return {
        "device": torch.cuda.get_device_name(),
        "clock": "wall",
        "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20,
    }


def run_peak_gpu(size: int = 8192, reps: int = 10, trials: int = 3) -> dict:
    """Best of `trials` bfloat16 matmul rates on the GPU (FLOPs per second), each over `reps` products after three
    warm-ups, timed with CUDA events: the GPU MFU's denominator."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    best = 0.0
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.mm(a, b)
        end.record()
        torch.cuda.synchronize()
        best = max(best, 2.0 * size**3 * reps / (start.elapsed_time(end) / 1e3))
    return {
        "side": "peak",
        "matmul_size": size,
        "dtype": "bfloat16",
        "peak_flops_per_s": best,
        "device": torch.cuda.get_device_name(),
        "versions": _versions(),
    }


def run_peak(seconds: float = 1.0, size: int = 1024, trials: int = 3, dtype: str = "float32") -> dict:
    """Best of `trials` matmul rates of one thread in `dtype` (FLOPs per CPU-second): the MFU's denominator. In
    float32 torch's BLAS (`torch.mm`), oneDNN (the kernel `cpu_matmul: auto` may pick) where the build has it and the
    project's narrow kernel where it builds all run: the core's limit is the fastest one's, and each kernel's rate is
    recorded."""
    here = Path(__file__).resolve()
    sys.path[:0] = [str(here.parents[1]), str(here.parent)]
    from op_profile import kernel_rates

    _one_thread()
    rates = kernel_rates(dtype, seconds, size, trials)
    return {
        "side": "peak",
        "matmul_size": size,
        "dtype": dtype,
        "peak_flops_per_s": max(rates.values()),
        "peak_flops_per_s_by_kernel": rates,
        "versions": _versions(),
    }


def attention_width(config) -> int:
    """Layers x query heads x head size of a transformers config: the width that attention's FLOPs scale with."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers * heads * head_dim


def distinct_prompt_tokens(prompts: list[list[int]], n: int, batch: int, shared: bool) -> int:
    """Prompt tokens a pass over the step's samples runs when each batch of `batch` samples (a generate() call, an
    update micro-batch) runs each distinct prompt once (`shared`), else every sample's own copy."""
    rows = [p for p in prompts for _ in range(n)]
    if not shared:
        return sum(len(p) for p in rows)
    return sum(
        sum(len(p) for p in {tuple(p) for p in rows[lo : lo + batch]}) for lo in range(0, len(rows), batch)
    )


def run_project(spec: dict) -> dict:
    """`warmup_steps` + 1 steps of the project's GRPO step; the figures are the last step's."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pasodoble.accel import cpu_matmul, decode_kernel, fused_layers, narrow_matmul, train_attention
    from pasodoble.config import apply_override, from_dict
    from pasodoble.core.grpo import group_advantages
    from pasodoble.roles.role import Role, RoleConfig, Sample

    device = spec.get("device", "cpu")
    if device == "cpu":
        _one_thread()
    clock = device_clock(device)
    steps, per_step, n = spec["warmup_steps"] + 1, spec["prompts"], spec["num_generations"]
    data = {
        "model": spec["model_dir"],
        "num_generations": n,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_prompt_length": 4096,
        "max_completion_length": spec["max_new_tokens"],
        "lr": spec["lr"],
        "loss_type": "dr_grpo",
        "micro_batch_size": spec["micro_batch"],
        "generation_batch_size": per_step * n,  # one generate() call per step, as TRL makes
        "device": device,
        "dtype": spec.get("dtype", "float32"),
        # budgets from the model's shape (update/token_budget.py); --project-set replaces them
        "micro_batch_tokens": "auto",
        "logprob_chunk_tokens": "auto",
    }
    for item in spec.get("project_overrides", []):
        apply_override(data, item)
    cfg = from_dict(RoleConfig, data, "project")
    cfg.validate()
    torch.manual_seed(spec["seed"])
    role = Role.from_pretrained("solver", cfg, spec["model_dir"], total_updates=steps)
    phases = []  # memory after each phase of each step (bench/host_memory.py reads it)
    for step in range(steps):
        chats = spec["chats"][step * per_step : (step + 1) * per_step]
        start = clock()  # from the chats, as TRL's generation phase starts from them
        prompts = [role.prompt_ids(chat) for chat in chats]
        groups = role.generate(prompts, seed=spec["seed"] + step)
        samples, advantages = [], []
        for prompt, group in zip(prompts, groups, strict=True):
            rewards = torch.tensor([reward(c.text) for c in group])
            advantages += group_advantages(rewards).tolist()
            samples += [Sample(prompt, c) for c in group]
        generated = clock()
        phases.append({"step": step, "after": "generation", **memory_mb()})  # outside the timed phases
        role.update(samples, advantages)
        done = clock()
        phases.append({"step": step, "after": "update", **memory_mb()})
    rows = [(i, len(p), len(c.token_ids)) for i, (p, g) in enumerate(zip(prompts, groups)) for c in g]
    return {
        "side": "project",
        "step_cpu_s": done - start,
        "generate_cpu_s": generated - start,
        "update_cpu_s": done - generated,
        "prompt_tokens": sum(len(p) for p in prompts) * n,
        "completion_tokens": sum(len(c.token_ids) for g in groups for c in g),
        "prefill_tokens": distinct_prompt_tokens(
            prompts, n, cfg.generation_batch_size, cfg.share_prompt_prefill
        ),
        "update_prompt_tokens": distinct_prompt_tokens(
            prompts, n, cfg.micro_batch_size, cfg.share_prompt_prefill
        ),
        "params": sum(p.numel() for p in role.model.parameters()),
        # attention's own FLOPs (vs_trl_stats.causal_pairs), for the MFU that counts them
        "attention_width": attention_width(role.model.config),
        "generate_attention_pairs": causal_pairs(rows, cfg.generation_batch_size, cfg.share_prompt_prefill),
        "update_attention_pairs": causal_pairs(rows, cfg.micro_batch_size, cfg.share_prompt_prefill),
        "settings": {
            "gradient_checkpointing": cfg.gradient_checkpointing,
            "micro_batch_size": cfg.micro_batch_size,
            "micro_batch_tokens": role.micro_batch_tokens,
            "logprob_chunk_tokens": role.logprob_chunk_tokens,
            "generation_batch_size": cfg.generation_batch_size,
            "share_prompt_prefill": cfg.share_prompt_prefill,
            "dtype": cfg.dtype,
            "cpu_matmul": cfg.cpu_matmul,
            # how many linear layers `cpu_matmul` turned (on a Zen 4 core "auto" turns the wide ones only)
            "onednn_linear_layers": sum(isinstance(m, cpu_matmul.OneDnnLinear) for m in role.model.modules()),
            # and how many it turned onto the project's narrow kernel (on a Zen 4 core: the ones oneDNN leaves)
            "narrow_linear_layers": sum(
                isinstance(m, narrow_matmul.NarrowLinear) for m in role.model.modules()
            ),
            "narrow_matmul": narrow_matmul.status(),  # the compiled products of narrow linear layers
            "decode_kernel": decode_kernel.status(),  # the compiled shared-prompt decode attention
            "train_attention": train_attention.status(),  # the compiled several-token attention
            "fused_layers": fused_layers.status(),  # the compiled RMSNorm, rotary embedding and SiLU gate
        },
        "peak_rss_mb": peak_rss_mb(),
        "phases": phases,
        **_device_figures(device),
        "versions": _versions(),
    }


def _trl_config(spec: dict, defaults: bool, output_dir: str):
    from trl import GRPOConfig

    sequences = spec["prompts"] * spec["num_generations"]
    work = dict(
        output_dir=output_dir,
        per_device_train_batch_size=spec["micro_batch"],
        gradient_accumulation_steps=sequences // spec["micro_batch"],
        num_generations=spec["num_generations"],
        max_completion_length=spec["max_new_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        loss_type="dr_grpo",
        beta=0.0,
        num_iterations=1,
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        max_steps=spec["warmup_steps"] + 1,
        shuffle_dataset=False,
        seed=spec["seed"],
        bf16=spec.get("dtype", "float32") == "bfloat16",  # autocast over float32 weights, as the project's
        use_cpu=spec.get("device", "cpu") == "cpu",
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    if not defaults:  # the project's defaults: no gradient checkpointing, torch's plain AdamW
        work.update(gradient_checkpointing=False, optim="adamw_torch")
    return GRPOConfig(**work)


def run_trl(spec: dict, defaults: bool) -> dict:
    """The same work through TRL's GRPOTrainer; a callback times each optimizer step, a wrapper the generation."""
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    device = spec.get("device", "cpu")
    if device == "cpu":
        _one_thread()
    clock = device_clock(device)
    torch.manual_seed(spec["seed"])
    steps = spec["warmup_steps"] + 1
    chats = spec["chats"][: steps * spec["prompts"]]
    dataset = Dataset.from_dict({"prompt": chats})
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token

    def reward_func(prompts, completions, **_) -> list[float]:
        return [reward(_text(c)) for c in completions]

    marks: dict[str, list] = {"begin": [], "end": [], "generate": [], "batch": []}

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            marks["begin"].append(clock())

        def on_step_end(self, args, state, control, **kwargs):
            marks["end"].append(clock())

    with tempfile.TemporaryDirectory() as tmp:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_func,
            args=_trl_config(spec, defaults, tmp),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[StepClock()],
        )
        inner = trainer._generate_and_score_completions  # pinned TRL version: generation, rewards, advantages

        def timed(inputs):
            start = clock()
            batch = inner(inputs)
            marks["generate"].append(clock() - start)
            marks["batch"].append(batch)
            return batch

        trainer._generate_and_score_completions = timed
        trainer.train()
    if len(marks["end"]) != steps or len(marks["generate"]) != steps:
        raise RuntimeError(
            f"TRL ran {len(marks['end'])} steps and {len(marks['generate'])} generations, not {steps}"
        )
    step_s, generate_s, batch = (
        marks["end"][-1] - marks["begin"][-1],
        marks["generate"][-1],
        marks["batch"][-1],
    )
    lengths = zip(batch["prompt_mask"].sum(1).tolist(), batch["completion_mask"].sum(1).tolist())
    rows = [(k, int(p), int(c)) for k, (p, c) in enumerate(lengths)]
    return {
        "side": "trl_defaults" if defaults else "trl",
        "step_cpu_s": step_s,
        "generate_cpu_s": generate_s,
        "update_cpu_s": step_s - generate_s,
        "prompt_tokens": int(batch["prompt_mask"].sum()),
        "completion_tokens": int(batch["completion_mask"].sum()),
        "params": sum(p.numel() for p in model.parameters()),
        "attention_width": attention_width(model.config),  # every row runs its own prompt in both phases
        "generate_attention_pairs": causal_pairs(rows, len(rows), shared=False),
        "update_attention_pairs": causal_pairs(rows, len(rows), shared=False),
        "settings": {
            "gradient_checkpointing": trainer.args.gradient_checkpointing,
            "optim": getattr(trainer.args.optim, "value", str(trainer.args.optim)),
            "bf16": trainer.args.bf16,
        },
        "peak_rss_mb": peak_rss_mb(),
        **_device_figures(device),
        "versions": _versions(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=SIDES, required=True)
    ap.add_argument("--spec", type=Path, help="the work, as bench/vs_trl.py writes it (not for --side peak)")
    ap.add_argument("--out", type=Path, required=True, help="JSON record to write")
    ap.add_argument("--device", default="cpu", help="cpu (one pinned thread) or cuda")
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        help="--side peak only: the matmul's dtype (default: float32 on a CPU, bfloat16 on a GPU)",
    )
    args = ap.parse_args()
    if args.side == "peak":
        record = run_peak(dtype=args.dtype or "float32") if args.device == "cpu" else run_peak_gpu()
    else:
        spec = json.loads(args.spec.read_text())
        record = run_project(spec) if args.side == "project" else run_trl(spec, args.side == "trl_defaults")
    record["threads"] = os.environ.get("OMP_NUM_THREADS")
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
