"""One rank of the collective tests (tests/test_distributed.py): `python -m tests.distributed_worker SCENARIO`.

The rank, world size and rendezvous come from the environment, as a launcher sets them. Prints JSON lines; a failed
collective prints its error line on stderr and exits with code 1 (`TorchDistributed.fail`).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from pasodoble.distributed import from_env


def main(scenario: str) -> int:
    collective = from_env(timeout_s=float(os.environ.get("TEST_TIMEOUT_S", "30")))
    rank = collective.rank
    if scenario == "collectives":
        out = {
            "broadcast": collective.broadcast({"from": rank}, "test"),
            "gather": collective.all_gather(["r", rank], "test"),
            "tensors": [t.tolist() for t in collective.all_gather_tensor(torch.tensor([rank, rank * 10]))],
        }
        collective.barrier("test")
        print(json.dumps(out), flush=True)
        collective.close()
    elif scenario in ("dead", "silent"):
        collective.barrier("start")
        print(json.dumps({"started": time.time()}), flush=True)
        if rank == 1:
            if scenario == "dead":
                os._exit(3)
            time.sleep(120)
        collective.all_gather(rank, "solver answers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
