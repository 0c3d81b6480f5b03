"""The measuring sections of `bench/gpu_check.py`: update, weight_sync, generation, two_roles (see its docstring).

Each section takes the check's context (`device`, `shape`, `root`, `peak_tflops`) and returns a JSON-ready dict, or
raises `Skip(reason)` where it cannot run here. Models are random-init from `gpu_check`'s configs, built once per
(architecture, seed) under the context's folder.

`plain_update` is the reference the `update` section compares against: TRL's `GRPOTrainer` loop written out (not
TRL itself), right-padded micro-batches of `micro_batch` sequences, one forward each, full logits in float32,
log-softmax and gather, the clipped ratio against its own detached log-probs, a constant-normalised (Dr. GRPO) sum,
backward, then gradient clipping and one AdamW step; no statistic read back to the host. `liger_update` is the
same loop with Liger's fused linear GRPO loss (the `liger` arm; it runs on a CPU too, and writes
`{"skipped": reason}` where liger-kernel is not importable).
"""

from __future__ import annotations

import functools
import gc
import random
import shutil
import statistics
import time
from pathlib import Path

import torch
from gpu_check import build_model_dir, sync
from transformers import AutoModelForCausalLM

from pasodoble.core.grpo import group_advantages
from pasodoble.roles.role import READ_BACK, Role, RoleConfig, Sample, collate
from pasodoble.rollout.base import Completion, SamplingParams
from pasodoble.rollout.settings import CPU_HEAD_SIZES, VLLMConfig, vllm_available
from pasodoble.update import precision

# the Role's one copy of its statistics to the host, which no aten operator above names
HOST_SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::item", READ_BACK)
COUNTING = (
    "profiler aten::_local_scalar_dense + aten::nonzero (aten::item runs the first) + the Role's "
    f"{READ_BACK} region (one copy of its statistics) in one update, outside the optimizer's step; the step's own "
    "are host_syncs_in_optimizer_step (torch's CPU AdamW reads each parameter's step count back, the fused CUDA "
    "AdamW none), in every arm alike"
)


class Skip(Exception):
    """A section (or part) that cannot run on this machine; the message says why."""


def release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def memory(device: str) -> dict:
    """Device memory now: free and allocated GB on a GPU (the whole device: vLLM's child processes count), host
    RSS on a CPU."""
    if device.startswith("cuda"):
        free, total = torch.cuda.mem_get_info()
        return {
            "free_gb": free / 1e9,
            "used_gb": (total - free) / 1e9,
            "torch_gb": torch.cuda.memory_allocated() / 1e9,
        }
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return {"rss_gb": int(line.split()[1]) * 1024 / 1e9}
    return {}


def model_dir(ctx: dict, arch: dict, seed: int) -> tuple[Path, int]:
    """The model folder of (`arch`, `seed`), built on first use (bf16 files on a GPU, float32 on a CPU)."""
    cache = ctx.setdefault("models", {})
    key = (tuple(sorted(arch.items())), seed)
    if key not in cache:
        dtype = torch.bfloat16 if ctx["device"].startswith("cuda") else torch.float32
        folder = ctx["root"] / f"{arch['hidden_size']}x{arch['num_hidden_layers']}"
        cache[key] = build_model_dir(folder, arch, seed, dtype)
    return cache[key]


def synthetic_prompts(shape, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(shape.prompt_tokens)] for _ in range(shape.prompts)]


def synthetic_batch(shape, vocab: int, seed: int) -> tuple[list[Sample], list[float]]:
    """One step's samples at the bench shape (completion lengths drawn in [new_tokens / 4, new_tokens]) and
    group-normalised random advantages: a random model writes nothing worth grading."""
    rng = random.Random(seed)
    samples, advantages = [], []
    for prompt in synthetic_prompts(shape, vocab, seed):
        rewards = []
        for _ in range(shape.samples):
            n = rng.randint(max(shape.new_tokens // 4, 1), shape.new_tokens)
            ids = [rng.randrange(100, vocab) for _ in range(n)]
            samples.append(Sample(prompt, Completion("", ids, [-1.0] * n, "length")))
            rewards.append(rng.random())
        advantages += group_advantages(torch.tensor(rewards)).tolist()
    return samples, advantages


def role_config(ctx: dict, path: Path, **fields) -> RoleConfig:
    shape = ctx["shape"]
    cfg = RoleConfig(
        model=str(path),
        num_generations=shape.samples,
        temperature=1.0,
        max_prompt_length=shape.prompt_tokens + 64,
        max_completion_length=shape.new_tokens,
        micro_batch_size=shape.micro_batch,
        dtype=shape.dtype,
        device=ctx["device"],
        vllm=VLLMConfig(gpu_memory_utilization=shape.gpu_memory_utilization),
        **fields,
    )
    cfg.validate()
    return cfg


def plain_update(model, samples, advantages, *, pad_id: int, micro_batch: int, new_tokens: int, dtype: str):
    """TRL's plain padded GRPO update as a callable (see the module docstring)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    device = next(model.parameters()).device
    compute = precision.DTYPES[dtype]

    def run() -> None:
        for lo in range(0, len(samples), micro_batch):
            batch = {k: v.to(device) for k, v in collate(samples[lo : lo + micro_batch], pad_id).items()}
            adv = torch.tensor(advantages[lo : lo + micro_batch], device=device)[:, None]
            ids = batch["input_ids"]
            with precision.autocast(device, compute):
                logits = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits[:, :-1]
            logps = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
            ratio = torch.exp(logps - logps.detach())
            per_token = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
            loss = (per_token * batch["completion_mask"][:, 1:]).sum() / (len(samples) * new_tokens)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


def liger_update(model, samples, advantages, *, pad_id: int, micro_batch: int, new_tokens: int, dtype: str):
    """`plain_update`'s loop with Liger's fused linear GRPO loss (`pasodoble.update.liger`, the Role's
    `loss_kernel: liger`) in place of the full logits: the decoder's last hidden states and the LM head's weight go
    to Liger, as TRL's `compute_liger_loss` passes them; each micro-batch's Dr. GRPO loss is scaled by its share of
    the batch's rows. The loss math is compiled on CUDA, eager on a CPU, as the Role runs it."""
    from pasodoble.update.liger import fused_policy_loss, grpo_loss

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    device = next(model.parameters()).device
    compute = precision.DTYPES[dtype]
    loss_fn = grpo_loss(
        beta=0.0, epsilon=0.2, epsilon_high=None, loss_type="dr_grpo", max_completion_length=new_tokens,
        compiled=device.type == "cuda",
    )  # fmt: skip

    def run() -> None:
        for lo in range(0, len(samples), micro_batch):
            batch = {k: v.to(device) for k, v in collate(samples[lo : lo + micro_batch], pad_id).items()}
            batch["advantages"] = adv = torch.tensor(advantages[lo : lo + micro_batch], device=device)
            with precision.autocast(device, compute):
                loss, _ = fused_policy_loss(loss_fn, model, batch)
            (loss * len(adv) / len(samples)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


def in_optimizer_step(event) -> bool:
    """Whether a profiler event ran inside an optimizer's step (the profiler's `Optimizer.step#...` region)."""
    while event is not None:
        if event.name.startswith("Optimizer.step#"):
            return True
        event = event.cpu_parent
    return False


def profile_counts(fn) -> tuple[int, dict, dict]:
    """(aten operator calls, {host-sync operator: calls} outside the optimizer's step, the same inside it) of one
    call of `fn`. The step is counted apart: torch's CPU AdamW reads each parameter's step count back
    (`_get_value`), one sync a parameter, where the fused CUDA AdamW the roles use on a GPU reads none."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.events()
    ops = sum(1 for e in events if e.name.startswith("aten::"))
    syncs = {name: 0 for name in HOST_SYNC_OPS}
    in_step = dict(syncs)
    for e in events:
        if e.name in syncs:
            (in_step if in_optimizer_step(e) else syncs)[e.name] += 1
    return ops, syncs, in_step


def measure_arm(ctx: dict, fn, tokens: int, params: int) -> dict:
    """Seconds per update (median of the timed repetitions after one warm-up), peak GB, MFU, operator and
    host-sync counts of one more, profiled, call."""
    device, reps = ctx["device"], ctx["shape"].reps
    fn()
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 1e9 if device.startswith("cuda") else None
    ops, syncs, in_step = profile_counts(fn)
    s = statistics.median(times)
    peak_tflops = ctx.get("peak_tflops")
    # 6 N per trained token (forward + backward), pad tokens not counted: the useful work of either arm.
    mfu = 6 * params * tokens / s / (peak_tflops * 1e12) if peak_tflops else None

    def count(found: dict) -> int:
        # `item` runs _local_scalar_dense
        return found["aten::_local_scalar_dense"] + found["aten::nonzero"] + found[READ_BACK]

    return {
        "s_per_update": s,
        "times_s": times,
        "peak_gb": peak,
        "mfu": mfu,
        "op_calls": ops,
        "host_syncs_per_update": count(syncs),
        "host_sync_ops": syncs,
        "host_syncs_in_optimizer_step": count(in_step),
        "host_sync_counting": COUNTING,
    }


def measure_role(ctx: dict, role: Role, samples, advantages, tokens: int, params: int) -> dict:
    """`measure_arm` of `role.update` on the samples, with its layout, micro-batches and token budget."""
    for s in samples:  # generated at the current weights, as in a live step
        s.completion.policy_version = role.updates
    plan, packed = role.micro_batch_layout(samples)
    layout = "padding_free" if role.padding_free else "packed" if packed else "padded"
    return {
        **measure_arm(ctx, functools.partial(role.update, samples, advantages), tokens, params),
        "micro_batches": len(plan),
        "micro_batch_tokens": role.micro_batch_tokens,
        "layout": layout,
        "attention": role.update_attention or role.model.config._attn_implementation,
    }


def section_update(ctx: dict) -> dict:
    shape, device = ctx["shape"], ctx["device"]
    path, params = model_dir(ctx, shape.arch, 0)
    samples, advantages = synthetic_batch(shape, shape.arch["vocab_size"], seed=0)
    tokens = sum(len(s.prompt_ids) + len(s.completion.token_ids) for s in samples)
    out = {"params": params, "samples": len(samples), "tokens": tokens, "arms": {}}
    role = Role.from_pretrained("solver", role_config(ctx, path, engine="hf"), path)
    out["arms"]["project"] = measure_role(ctx, role, samples, advantages, tokens, params)
    pad_id = role.tokenizer.pad_token_id
    if role.padding_free:  # CUDA: the project's layout is the padding-free one
        out["arms"]["padding_free"] = {"same_as": "project"}
    else:  # a CPU: the same role's update asked to run padding-free
        role = Role.from_pretrained("solver", role_config(ctx, path, engine="hf"), path)
        if not role.use_padding_free():
            raise RuntimeError("the bench model cannot run padding-free")
        out["arms"]["padding_free"] = measure_role(ctx, role, samples, advantages, tokens, params)
    del role
    release(device)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to(device)
    run = plain_update(
        model, samples, advantages, pad_id=pad_id, micro_batch=shape.micro_batch,
        new_tokens=shape.new_tokens, dtype=shape.dtype,
    )  # fmt: skip
    out["arms"]["plain"] = {
        **measure_arm(ctx, run, tokens, params),
        "micro_batches": -(-len(samples) // shape.micro_batch),
    }
    del model, run
    release(device)
    out["arms"]["liger"] = liger_arm(ctx, path, samples, advantages, pad_id, tokens, params)
    plain = out["arms"]["plain"]
    for arm in out["arms"].values():
        if "op_calls" in arm:
            arm["op_calls_vs_plain"] = arm["op_calls"] / plain["op_calls"]
            arm["speed_vs_plain"] = plain["s_per_update"] / arm["s_per_update"]
    return out


def liger_arm(ctx: dict, path: Path, samples, advantages, pad_id: int, tokens: int, params: int) -> dict:
    """The plain loop with Liger's fused loss (`liger_update`), or `{"skipped": reason}` where liger-kernel is not
    importable."""
    from pasodoble.update.liger import liger_unavailable

    shape, device = ctx["shape"], ctx["device"]
    reason = liger_unavailable()
    if reason is not None:
        return {"skipped": reason}
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to(device)
    run = liger_update(
        model, samples, advantages, pad_id=pad_id, micro_batch=shape.micro_batch,
        new_tokens=shape.new_tokens, dtype=shape.dtype,
    )  # fmt: skip
    arm = {**measure_arm(ctx, run, tokens, params), "micro_batches": -(-len(samples) // shape.micro_batch)}
    del model, run
    release(device)
    return arm


def vllm_or_skip(ctx: dict, arch: dict) -> None:
    if not vllm_available():
        raise Skip("vllm is not importable (GPU: pip install vllm; CPU: make vllm-env and its python)")
    if not ctx["device"].startswith("cuda") and arch["head_dim"] not in CPU_HEAD_SIZES:
        raise Skip(f"the vLLM CPU build has no kernel for head_dim={arch['head_dim']}")


def vllm_engine(ctx: dict, path: Path, **fields):
    from transformers import AutoTokenizer

    from pasodoble.rollout.vllm import VLLMEngine

    shape = ctx["shape"]
    cfg = VLLMConfig(gpu_memory_utilization=shape.gpu_memory_utilization, sleep_mode=False, **fields)
    max_len = shape.prompt_tokens + max(*shape.gen_lengths, shape.new_tokens) + 8
    return VLLMEngine(
        cfg, path, AutoTokenizer.from_pretrained(str(path)), max_model_len=max_len, dtype=shape.dtype
    )


def outputs(engine, prompts: list[list[int]], new_tokens: int) -> list[tuple[list[int], list[float]]]:
    """Seeded samples and their log-probs: a random model with a tied head tends to repeat its input greedily
    whatever its weights, so sampled log-probs are what tells two sets of weights apart."""
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=new_tokens, seed=0)
    return [(g[0].token_ids, g[0].logprobs) for g in engine.generate(prompts, params)]


def gap(a, b) -> float:
    """Largest log-prob difference of two `outputs` (infinite where the sampled tokens differ)."""
    if [ids for ids, _ in a] != [ids for ids, _ in b]:
        return float("inf")
    return max((abs(x - y) for (_, la), (_, lb) in zip(a, b) for x, y in zip(la, lb)), default=0.0)


def timed_sync(engine_sync, model, device: str, reps: int) -> float:
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        engine_sync(model)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sync_into_vllm(ctx: dict, path: Path, trainer) -> dict:
    """Today's /dev/shm reload against the direct load from tensors, in one engine whose core runs in this process
    (so that it can take both), and the sampled outputs after each."""
    shape = ctx["shape"]
    engine = vllm_engine(ctx, path, enforce_eager=True, enable_prefix_caching=False, weight_sync="direct")
    try:
        prompts = synthetic_prompts(shape, trainer.config.vocab_size, seed=5)[:2]
        before = outputs(engine, prompts, 8)
        out = {"shm_reload_s": timed_sync(engine.reload_through_shm, trainer, ctx["device"], shape.reps + 1)}
        after_shm = outputs(engine, prompts, 8)
        with torch.no_grad():  # back to the saved weights, so that the direct load has something to change
            engine.load_direct(AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32))
        out["direct_load_s"] = timed_sync(engine.load_direct, trainer, ctx["device"], shape.reps + 1)
        out["direct_vs_shm_logprob_gap"] = gap(outputs(engine, prompts, 8), after_shm)
        out["sync_changed_logprobs"] = gap(before, after_shm) > 1e-3
        return out
    finally:
        engine.close()


def section_weight_sync(ctx: dict) -> dict:
    from pasodoble.rollout.shm import make_shm_dir
    from pasodoble.rollout.weights import write_weights

    device, out = ctx["device"], {}
    for name, arch in ctx["shape"].sync_archs.items():
        path, params = model_dir(ctx, arch, 7)
        trainer = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to(device)
        with torch.no_grad():  # new weights, so that a sync changes what the engine samples
            for p in trainer.parameters():
                p.add_(torch.randn_like(p), alpha=0.02)
        folder = make_shm_dir("gpu-check")
        try:
            sync(device)
            start = time.perf_counter()
            write_weights(trainer, folder / "w")
            row = {"params": params, "shm_write_s": time.perf_counter() - start}
            row["shm_gb"] = sum(f.stat().st_size for f in (folder / "w").iterdir()) / 1e9
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        try:
            vllm_or_skip(ctx, arch)
            row["vllm"] = sync_into_vllm(ctx, path, trainer)
        except Skip as e:
            row["vllm"] = {"skipped": str(e)}
        out[name] = row
        del trainer
        release(device)
    return out


def tokens_per_s(engine, prompts, shape, new_tokens: int) -> dict:
    params = SamplingParams(n=shape.samples, temperature=1.0, max_new_tokens=new_tokens, seed=0)
    engine.generate(prompts[:1], SamplingParams(n=1, temperature=1.0, max_new_tokens=4, seed=0))  # warm-up
    start = time.perf_counter()
    groups = engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for g in groups for c in g)
    return {"tokens": tokens, "s": seconds, "tokens_per_s": tokens / seconds}


def section_generation(ctx: dict) -> dict:
    shape = ctx["shape"]
    path, params = model_dir(ctx, shape.arch, 0)
    prompts = synthetic_prompts(shape, shape.arch["vocab_size"], seed=3)
    out = {"params": params, "prompts": len(prompts), "samples": shape.samples, "hf": {}, "vllm": {}}
    role = Role.from_pretrained("solver", role_config(ctx, path, engine="hf", trainable=False), path)
    for n in shape.gen_lengths:
        out["hf"][str(n)] = tokens_per_s(role.engine, prompts, shape, n)
    del role
    release(ctx["device"])
    try:
        vllm_or_skip(ctx, shape.arch)
    except Skip as e:
        out["vllm"] = {"skipped": str(e)}
        return out
    engine = vllm_engine(ctx, path)
    try:
        for n in shape.gen_lengths:
            out["vllm"][str(n)] = tokens_per_s(engine, prompts, shape, n)
            out[f"vllm_vs_hf_{n}"] = out["vllm"][str(n)]["tokens_per_s"] / out["hf"][str(n)]["tokens_per_s"]
    finally:
        engine.close()
    return out


def section_two_roles(ctx: dict) -> dict:
    """Two roles on one device through one dual-play-shaped step with the default engine (`auto`: vLLM with sleep
    mode on a GPU, the HF loop on a CPU), the device's memory after each phase."""
    shape, device = ctx["shape"], ctx["device"]
    phases, start = [], time.perf_counter()

    def mark(phase: str) -> None:
        sync(device)
        phases.append({"phase": phase, "t_s": time.perf_counter() - start, **memory(device)})

    mark("start")
    roles = {}
    for seed, name in enumerate(("proposer", "solver")):
        path, params = model_dir(ctx, shape.arch, seed)
        roles[name] = Role.from_pretrained(name, role_config(ctx, path), path, total_updates=2)
        mark(f"{name} built")
    try:
        proposer, solver = roles["proposer"], roles["solver"]
        prompts = synthetic_prompts(shape, shape.arch["vocab_size"], seed=11)[: max(shape.prompts // 4, 1)]
        p_groups = proposer.generate(prompts, seed=1)
        mark("proposer generated")
        s_prompts = [
            list(prompts[i // shape.samples]) + c.token_ids[:16] for i, c in enumerate(sum(p_groups, []))
        ]
        s_groups = solver.generate(s_prompts, seed=2)
        mark("solver generated")
        syncs = {}
        for name, ids, groups in (("proposer", prompts, p_groups), ("solver", s_prompts, s_groups)):
            samples = [Sample(ids[i], c) for i, g in enumerate(groups) for c in g]
            adv = []
            for g in groups:
                adv += group_advantages(torch.tensor([float(len(c.token_ids)) for c in g])).tolist()
            stats = roles[name].update(samples, adv)
            syncs[name] = stats["weight_sync_s"]
            mark(f"{name} updated and synced")
        proposer.generate(prompts, seed=3)
        mark("proposer generated after its sync")
        engines = {n: type(r.engine).__name__ for n, r in roles.items()}
        asleep = {n: getattr(getattr(r.engine, "sleep", None), "enabled", False) for n, r in roles.items()}
        return {
            "params_per_role": params,
            "engines": engines,
            "sleep_mode": asleep,
            "weight_sync_s": syncs,
            "phases": phases,
        }
    finally:
        for role in roles.values():
            close = getattr(role.engine, "close", None)
            if callable(close):
                close()


SECTIONS = {
    "update": section_update,
    "weight_sync": section_weight_sync,
    "generation": section_generation,
    "two_roles": section_two_roles,
}
