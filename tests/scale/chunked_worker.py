"""One rank of tests/scale/test_chunked_ddp.py: `python -m tests.scale.chunked_worker`. Two updates of a role under
Accelerate's DDP on this rank's share against one rank on all samples (tests/distributed_worker.py), counting the
chunked LM-head log-prob calls that went through the DDP wrapper."""

from __future__ import annotations

import json
import os
import sys

from pasodoble.scale.collectives import end_process, from_env


def main() -> int:
    import pasodoble.update.logprobs as logprobs_module
    from tests.distributed_worker import ddp_update_vs_one_rank

    calls = {"wrapped": 0, "plain": 0}
    chunked = logprobs_module.chunked_token_logprobs  # what the `chunked` layout calls

    def counted(model, *args, **kwargs):
        calls["wrapped" if hasattr(model, "module") else "plain"] += 1
        return chunked(model, *args, **kwargs)

    logprobs_module.chunked_token_logprobs = counted
    collective = from_env(timeout_s=float(os.environ.get("TEST_TIMEOUT_S", "120")))
    result = ddp_update_vs_one_rank(collective, checkpointing=False)
    print(json.dumps({**result, "chunked_calls": calls}), flush=True)
    collective.close()
    return 0


if __name__ == "__main__":
    sys.exit(end_process(main()))
