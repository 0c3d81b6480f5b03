"""Which escape cases each sandbox layer decides: every case with one layer removed at a time.

    PYTHONPATH=. python tests/sandbox/layer_table.py > table.md      # a few minutes; the table in docs/SANDBOX.md

A case "fails" when its verdict is no longer the exact one `cases.py` expects. The whole jail (`bwrap`) is never
removed here: that would run the attacks on the host itself (`kill(-1)` as the launcher's user); the refusal without
bubblewrap has its own test. Each row shows the verdicts that changed, so a layer whose row is empty is one that
other layers fully cover for these cases (defence in depth), not one that does nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from pasodoble.sandbox import SandboxConfig, check
from pasodoble.sandbox.jail import ALL_LAYERS
from tests.sandbox.cases import CASES, OUTSIDE_TMP, SECRET_ENV, Context, verdict_matches

REMOVABLE = [layer for layer in ALL_LAYERS if layer != "bwrap"]


def failures(layer: str | None) -> list[str]:
    broken = []
    for case in CASES:
        ctx = Context(Path(tempfile.mkdtemp(prefix="pasodoble-escape-", dir=OUTSIDE_TMP)))
        try:
            before = ctx.snapshot()
            off = (layer,) if layer else ()
            verdict = check(
                case.make(ctx), SandboxConfig(**{"timeout_s": 5.0, **case.config, "_layers_off": off})
            )
            changed = ctx.snapshot() != before
        finally:
            ctx.close()
            shutil.rmtree(ctx.tmp)
        if changed or not verdict_matches(case, verdict):
            got = (
                verdict.outputs[0].strip()[:40]
                if verdict.outputs and verdict.status == "passed"
                else verdict.status
            )
            broken.append(f"{case.name} ({got}{', outside changed' if changed else ''})")
    return broken


def main() -> int:
    os.environ[SECRET_ENV] = "s3cr3t"
    print("| layer removed | cases whose verdict changes (what they got) |")
    print("|---|---|")
    for layer in [None, *REMOVABLE]:
        broken = failures(layer)
        print(f"| {layer or '(none)'} | {'; '.join(broken) or '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
