"""GPU check: one call that measures the GPU path section by section, its JSON rewritten after each section.

What: five sections on random-init models built from configs (Qwen3-0.6B and -1.7B architectures, a synthetic
tokenizer of the same vocabulary; no hub, no dataset):
  - `env`: versions (torch, CUDA, transformers, vLLM), the device and its memory, the measured matmul rate next to
    the card's dense bf16 peak, /dev/shm's size;
  - `update`: one GRPO update at the bench shape (16 prompts x 8 samples, 128-token prompts, up to 256 completion
    tokens) in today's layout (`Role.update`), the padding-free layout where it exists, and TRL's plain padded loop
    written out here (`gpu_sections.plain_update`), and that loop with Liger's fused GRPO loss (`liger`, where
    liger-kernel is importable: CUDA, or a CPU with it installed without Triton): s/update, peak GB, MFU, `host_syncs_per_update` (profiler counts of
    `aten::_local_scalar_dense`, `aten::nonzero`, `aten::item`) and `op_calls_vs_plain` (aten calls over the plain
    loop's);
  - `weight_sync`: at 0.6B and 1.7B, the seconds of a sync into an in-process vLLM engine, direct from the trainer's
    tensors against today's /dev/shm reload, and the log-prob gap of seeded samples after both;
  - `generation`: tokens/s of vLLM against the HF loop at 256 and 1,024 new tokens;
  - `two_roles`: two 0.6B roles on one device through one dual-play step with the default engine (vLLM with sleep
    mode on a GPU), free device memory (host RSS on a CPU) at each phase.
A section that cannot run here writes `{"skipped": reason}`; one that fails writes `{"error": ...}` and the next
one still runs (exit code 1 at the end), so a GPU call that times out or trips on one part still returns data.

Budget: one call of at most about 8 minutes on one H100 or H200 (`--sections` to rerun a subset). `--device cpu
--quick` runs every section on a CPU with tiny shapes in a minute or two, so the GPU call only measures.

    python bench/gpu_check.py --json bench-out/gpu_check.json                  # one H100/H200, ~8 min
    python bench/gpu_check.py --device cpu --quick --json /tmp/gpu_check.json  # the same code path on a CPU
    python bench/gpu_check.py --sections update,weight_sync --json F           # a subset

Tests: tests/bench/test_gpu_check.py (the quick run, and its vLLM sections on the CPU build under marker `vllm`).
The dual-play throughput run through the sharding backends is `bench/gpu_dualplay.py`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}
QWEN3_0_6B = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=8192,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
QWEN3_1_7B = {**QWEN3_0_6B, "hidden_size": 2048, "intermediate_size": 6144}
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    vocab_size=512,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SECTIONS = ("env", "update", "weight_sync", "generation", "two_roles")


@dataclass
class Shape:
    """The sizes of every section: the bench shape on a GPU, tiny ones with `--quick`."""

    arch: dict  # the model of `update`, `generation` and `two_roles`
    sync_archs: dict  # name -> architecture, the sizes `weight_sync` measures
    prompts: int  # prompts per update / rollout
    samples: int  # completions per prompt
    prompt_tokens: int  # tokens of each synthetic prompt
    new_tokens: int  # the update's longest completion (lengths drawn in [new_tokens / 4, new_tokens])
    gen_lengths: tuple  # new tokens of the `generation` section's runs
    micro_batch: int  # sequences per micro-batch (both update arms)
    reps: int  # timed repetitions after one warm-up
    matmul: int  # matrix size of the env section's matmul rate
    gpu_memory_utilization: float = 0.3  # per vLLM engine
    dtype: str = "bfloat16"  # the roles' compute dtype


GPU_SHAPE = Shape(
    QWEN3_0_6B, {"0.6b": QWEN3_0_6B, "1.7b": QWEN3_1_7B}, 16, 8, 128, 256, (256, 1024), 8, 3, 8192
)
QUICK_SHAPE = Shape(TINY, {"tiny": TINY}, 2, 2, 12, 8, (8, 16), 2, 1, 256, dtype="float32")


def synthetic_tokenizer(vocab_size: int):
    """A word-level tokenizer with `vocab_size` entries (specials, characters, then filler words `w<i>`)."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable))
    words = SPECIALS + chars
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token=SPECIALS[0]))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    fast.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model_dir(root: Path, arch: dict, seed: int, dtype: torch.dtype) -> tuple[Path, int]:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = synthetic_tokenizer(arch["vocab_size"])
    cfg = Qwen3Config(
        **arch, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(dtype)
    path = root / f"model-{seed}"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, sum(p.numel() for p in model.parameters())


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def matmul_tflops(device: str, dtype: torch.dtype, size: int, reps: int = 10) -> float:
    """Measured dense matmul rate (TFLOP/s) of `size`-square products on `device`."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b  # warm-up: kernel choice, allocator
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * size**3 * reps / (time.perf_counter() - start) / 1e12


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def section_env(ctx: dict) -> dict:
    device, shape = ctx["device"], ctx["shape"]
    shm = Path("/dev/shm")
    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": version("transformers"),
        "vllm": version("vllm"),
        "device": device,
        "cpu_count": os.cpu_count(),
        "dev_shm_gb": shutil.disk_usage(shm).total / 1e9 if shm.is_dir() else None,
        "dev_shm_free_gb": shutil.disk_usage(shm).free / 1e9 if shm.is_dir() else None,
    }
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    out["matmul_tflops"] = matmul_tflops(device, dtype, shape.matmul)
    out["matmul_dtype"] = str(dtype).removeprefix("torch.")
    if device.startswith("cuda"):
        free, total = torch.cuda.mem_get_info()
        name = torch.cuda.get_device_name()
        spec = next((v for k, v in BF16_PEAK_TFLOPS.items() if k in name), None)
        out.update(gpu=name, memory_total_gb=total / 1e9, memory_free_gb=free / 1e9, peak_tflops_spec=spec)
    ctx["peak_tflops"] = out.get("peak_tflops_spec") or out["matmul_tflops"]
    out["mfu_peak_tflops"] = ctx[
        "peak_tflops"
    ]  # what MFU divides by: the card's spec, else the measured rate
    return out


def write_report(path: Path | None, report: dict) -> None:
    """The report as JSON at `path`, replaced atomically (a timeout never leaves half a file)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    os.replace(tmp, path)


def run_sections(names: list[str], ctx: dict, json_path: Path | None) -> dict:
    import gpu_sections

    funcs = {"env": section_env, **gpu_sections.SECTIONS}
    report = {"device": ctx["device"], "quick": ctx["quick"], "sections": names}
    for name in names:
        start = time.perf_counter()
        try:
            result = funcs[name](ctx)
        except gpu_sections.Skip as e:
            result = {"skipped": str(e)}
        except (
            Exception
        ) as e:  # the call must still return the other sections: recorded, counted in the exit code
            result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        result["section_s"] = time.perf_counter() - start
        report[name] = result
        write_report(json_path, report)
        status = "skipped" if "skipped" in result else "error" if "error" in result else "ok"
        print(f"gpu_check: {name}: {status} in {result['section_s']:.1f} s", flush=True)
        gpu_sections.release(ctx["device"])
    return report


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a CPU smoke run of every section)")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}"
    )
    ap.add_argument("--json", type=Path, default=None, help="write the report here after every section")
    ap.add_argument(
        "--workdir", type=Path, default=None, help="where the random models go (default: a temp dir)"
    )
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        ap.error(f"--sections: unknown {', '.join(unknown)}; use {', '.join(SECTIONS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but no CUDA device is visible; use --device cpu --quick")
    if not args.device.startswith(("cpu", "cuda")):
        ap.error(f"--device: unknown {args.device!r}; use cuda or cpu")
    return args, names


def main(argv=None) -> int:
    import tempfile

    args, names = parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    root = args.workdir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    shape = QUICK_SHAPE if args.quick else GPU_SHAPE
    ctx = {"device": args.device, "quick": args.quick, "shape": shape, "root": root, "peak_tflops": None}
    try:
        report = run_sections(names, ctx, args.json)
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({k: v for k, v in report.items() if k not in SECTIONS}))
    return 1 if any("error" in report[n] for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
