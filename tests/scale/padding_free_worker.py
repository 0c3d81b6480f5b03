"""One rank of tests/scale/test_padding_free_sharded.py: `python -m tests.scale.padding_free_worker BACKEND...`.

For each backend (ddp, fsdp2, zero1, zero2, zero3) three roles from the same weights train one update on this rank's
share of the same batch: the padding-free layout (forced on this CPU, as the GPU check's CPU run forces it), the
padded one, and the padding-free one with positions that run on across the row's samples (the control). Prints one
JSON line: per backend the full weights' largest differences and each update's loss and grad norm, or
`{"skipped": reason}` where DeepSpeed is not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from unittest import mock

import torch

from pasodoble.scale.collectives import end_process, from_env

PROMPTS = ["a", "bb", "c"]  # 9 samples on 2 ranks: shares of 5 and 4


def _sharding(backend: str, world_size: int):
    from pasodoble.scale.sharding import build_sharding

    if backend.startswith("zero"):
        return build_sharding("deepspeed", world_size, zero_stage=int(backend[-1]))
    return build_sharding(backend, world_size)


def _role(backend: str, world_size: int, *, padding_free: bool):
    from pasodoble.roles.role import Role, RoleConfig
    from tests.loop_helpers import make_model, make_tokenizer

    cfg = RoleConfig(
        model="test", num_generations=3, temperature=1.0, max_completion_length=8, lr=1e-2, micro_batch_size=2
    )
    cfg.share_prompt_prefill = False  # the padded role's plain per-sample layout under every backend
    cfg.micro_batch_tokens = 80  # several padding-free micro-batches a rank, and zero-weight fillers
    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    model.set_attn_implementation("sdpa")  # the attention the padding-free update sets on a CPU
    role = Role("solver", cfg, model, tokenizer, sharding=_sharding(backend, world_size))
    assert role.use_padding_free() if padding_free else not role.padding_free
    return role


@contextlib.contextmanager
def _positions_run_on():
    """The control: every micro-batch's row counts its positions from 0 to its end, across its samples."""
    import pasodoble.roles.role as role_module

    flatten = role_module.flatten

    def run_on(*args, **kwargs):
        flat = flatten(*args, **kwargs)
        flat["position_ids"] = torch.arange(flat["input_ids"].shape[1])[None]
        return flat

    with mock.patch.object(role_module, "flatten", run_on):
        yield


def compare(backend: str, collective) -> dict:
    """One update of the padding-free, padded and control roles on the same batch under `backend`."""
    import pasodoble.update.logprobs as logprobs_module
    from pasodoble.roles.role import Role, RoleConfig
    from pasodoble.scale.data_parallel import update_shared
    from tests.loop_helpers import make_model, make_tokenizer
    from tests.roles.test_roles import sampled

    tokenizer = make_tokenizer()
    source = Role("solver", RoleConfig(model="test", num_generations=3, max_completion_length=8, temperature=1.0),
                  make_model(tokenizer), tokenizer)  # fmt: skip
    samples, advantages = sampled(source, PROMPTS, seed=0)  # the same batch on every rank
    start = {k: v.detach().clone() for k, v in source.model.state_dict().items()}
    scored = logprobs_module.padding_free_logprobs
    out, weights = {}, {}
    for name in ("padding_free", "padded", "control"):
        calls = {"padding_free": 0, "through_wrapper": 0, "head_in_forward": 0}

        def counted(model, *args, calls=calls, **kwargs):
            calls["padding_free"] += 1
            calls["through_wrapper"] += hasattr(model, "module")  # DDP's and DeepSpeed's wrappers
            calls["head_in_forward"] += not kwargs.get("head_outside_forward", True)
            return scored(model, *args, **kwargs)

        role = _role(backend, collective.world_size, padding_free=name != "padded")
        with (
            mock.patch.object(logprobs_module, "padding_free_logprobs", counted),
            _positions_run_on() if name == "control" else contextlib.nullcontext(),
        ):
            stats = update_shared(role, samples, advantages, collective)
        weights[name] = role.weights()  # full weights on every rank (a collective where sharded)
        out[name] = {"loss": stats["loss"], "grad_norm": stats["grad_norm"], "calls": calls}
    ref = weights["padded"]
    diff = {
        name: max((weights[name][k].float() - v.float()).abs().max().item() for k, v in ref.items())
        for name in ("padding_free", "control")
    }
    moved = max((ref[k].float() - v.float()).abs().max().item() for k, v in start.items())
    return {**out, "max_abs_diff": diff, "moved": moved}


def main(backends: list[str]) -> int:
    collective = from_env(timeout_s=float(os.environ.get("TEST_TIMEOUT_S", "120")))
    results = {}
    for backend in backends:
        if backend.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
            results[backend] = {"skipped": "the deepspeed extra is not installed (make deepspeed-env)"}
            continue
        results[backend] = compare(backend, collective)
    print(json.dumps(results), flush=True)
    collective.close()
    return 0


if __name__ == "__main__":
    sys.exit(end_process(main(sys.argv[1:])))
