"""One rank of the collective tests (tests/scale/test_distributed.py): `python -m tests.distributed_worker SCENARIO`.

The rank, world size and rendezvous come from the environment, as a launcher sets them. Prints JSON lines; a failed
collective prints its error line on stderr and exits with code 1 (`TorchDistributed.fail`).
"""

from __future__ import annotations

import json
import os
import sys
import time

from pasodoble.scale.collectives import end_process, from_env


def ddp_update_vs_one_rank(
    collective, *, checkpointing: bool, fsdp2: bool = False, num_iterations: int = 1
) -> dict:
    """Two updates through Accelerate's DDP (or torch's FSDP2), each rank on its share, vs one rank on all."""
    from pasodoble.roles.role import Role, RoleConfig
    from pasodoble.scale.data_parallel import update_shared
    from pasodoble.scale.sharding import build_sharding
    from pasodoble.scale.sharding.fsdp2 import FullyShard
    from pasodoble.scale.sharding.unsharded import Unsharded
    from tests.loop_helpers import make_model, make_tokenizer
    from tests.roles.test_roles import sampled

    cfg = RoleConfig(
        model="test",
        num_generations=3,
        temperature=1.0,
        max_completion_length=8,
        lr=1e-2,
        micro_batch_size=2,
        gradient_checkpointing=checkpointing,
        num_iterations=num_iterations,
    )
    tokenizer = make_tokenizer()
    engine = FullyShard(collective.world_size) if fsdp2 else build_sharding("ddp", collective.world_size)
    sharded = Role("solver", cfg, make_model(tokenizer), tokenizer, sharding=engine)
    single = Role("solver", cfg, make_model(tokenizer), tokenizer, sharding=Unsharded())
    stats = []
    for step in range(2):
        samples, advantages = sampled(single, ["a", "bb", "c"], seed=step)  # 9 samples: ragged shares
        stats.append(
            (update_shared(sharded, samples, advantages, collective), single.update(samples, advantages))
        )
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in sharded.model.parameters()]
    diff = max((a - b).abs().max().item() for a, b in zip(single.model.parameters(), full))
    return {
        "sharded_params": sum(hasattr(p, "full_tensor") for p in sharded.model.parameters()),
        "max_abs_diff": diff,
        "grad_norms": [[s["grad_norm"], f["grad_norm"]] for s, f in stats],
        "losses": [[s["loss"], f["loss"]] for s, f in stats],
    }


def main(scenario: str) -> int:
    collective = from_env(timeout_s=float(os.environ.get("TEST_TIMEOUT_S", "30")))
    rank = collective.rank
    if scenario == "collectives":
        out = {
            "broadcast": collective.broadcast({"from": rank}, "test"),
            "gather": collective.all_gather(["r", rank], "test"),
        }
        collective.barrier("test")
        print(json.dumps(out), flush=True)
        collective.close()
    elif scenario.startswith("update"):
        result = ddp_update_vs_one_rank(
            collective,
            checkpointing=scenario == "update-checkpointing",
            fsdp2=scenario.startswith("update-fsdp2"),
            num_iterations=2 if scenario == "update-fsdp2-mu2" else 1,
        )
        print(json.dumps(result))
        collective.close()
    elif scenario in ("dead", "silent"):
        collective.barrier("start")
        print(json.dumps({"started": time.time()}), flush=True)
        if rank == 1:
            if scenario == "dead":
                os._exit(3)
            time.sleep(120)
        collective.all_gather(rank, "solver answers")
    elif scenario.startswith("prepare"):  # prepare-slow | prepare-failed | prepare-over-budget
        budget_s = 4.0 if scenario == "prepare-over-budget" else 120.0

        def build():
            if scenario == "prepare-failed":
                raise RuntimeError("no space left on device")
            time.sleep(10.0)  # past the collectives' timeout (TEST_TIMEOUT_S)

        try:
            collective.rank0_first("test build", build, budget_s)
        except RuntimeError:
            return 4
        print(json.dumps({"gather": collective.all_gather(rank, "after the build")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(end_process(main(sys.argv[1])))
