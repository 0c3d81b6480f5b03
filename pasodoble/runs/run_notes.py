"""What a training command tells its user: where the outputs are, what to run next, and what Ctrl-C does.

Why: a newcomer should not have to search for the run folder, the trained models or the resume command. `train`
prints its run directory when it starts and, when it ends, the folders of the trained roles and the next commands
(plot, inspect, evaluate the trained Solver, train further); the demos end with the same kind of lines
(`demo_next`); `eval`, `sft` and `experiment` print their output folders the same way (see their modules).

Ctrl-C in `train`: the first one asks the loop to stop after the step it is in and write a checkpoint there (the
loop's `stop_requested`); the run then ends with the resume command, and `run_train` raises KeyboardInterrupt
so that its caller stops too (the CLI exits 130; an experiment does not take the stopped run as finished). A second Ctrl-C stops at once, and the message
names the last complete checkpoint, which is where `--resume` continues (or says that it starts over when there is
none). Stopping at a step boundary keeps resume exact: the checkpoint is the one an uninterrupted run would write
if it checkpointed at that step.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from pasodoble.checkpoint import latest_checkpoint


def _q(value: str | Path) -> str:
    return shlex.quote(str(value))


def resume_hint(run_dir: Path) -> str:
    """Which checkpoint `--resume` continues from, and the command."""
    ckpt = latest_checkpoint(run_dir)
    where = f"from {ckpt.name}" if ckpt is not None else "from the start (no checkpoint was written yet)"
    return f"resume {where}: pasodoble train --resume {_q(run_dir)}"


def eval_command(solver_dir: Path, run_dir: Path, *, tiers: Path | None, solver_template: str) -> str:
    """`pasodoble eval` of a trained Solver: on the tiny world's tiers, else on the paper's benchmarks."""
    from pasodoble.evals.runner import DEFAULT_TEMPLATE

    parts = ["pasodoble eval --model", _q(solver_dir)]
    if tiers is not None:
        parts += ["--dataset", _q(tiers), "--group-field tier"]
    else:
        parts += ["--benchmarks paper --num-samples 6 --temperature 0.6"]
    if solver_template != DEFAULT_TEMPLATE:
        parts += ["--prompt-template", _q(solver_template)]
    parts += ["--out", _q(run_dir / "eval-solver")]
    return " ".join(parts)


def train_finished(run_dir: Path, *, roles: list[str], tiers: Path | None, solver_template: str) -> str:
    """The closing lines of `pasodoble train`: outputs, trained roles' folders, next commands."""
    ckpt = latest_checkpoint(run_dir)
    samples = (run_dir / "samples.jsonl").is_file()  # off (samples_every: null) or not yet due: not promised
    written = ["config.yaml", "metrics.jsonl", *(["samples.jsonl"] if samples else []), "checkpoints/"]
    lines = [f"run directory: {run_dir} ({', '.join(written)})"]
    if ckpt is not None:
        for role in roles:
            lines.append(f"trained {role}: {ckpt / role / 'model'} (a Hugging Face model folder)")
    lines += [
        "next:",
        f"  pasodoble plot {_q(run_dir)}       # summary.png and one PNG per metric group, in plots/",
    ]
    if samples:
        lines.append(
            f"  pasodoble inspect {_q(run_dir)}    # samples.html: the rollouts, question by question"
        )
    if ckpt is not None and "solver" in roles:
        lines.append(
            "  "
            + eval_command(ckpt / "solver" / "model", run_dir, tiers=tiers, solver_template=solver_template)
        )
    lines.append(f"  pasodoble train --resume {_q(run_dir)} schedule.steps=N   # train further, to N steps")
    return "\n".join(lines)


def demo_next(runs: list[Path], more: list[tuple[str, str]]) -> str:
    """The closing lines of a demo: plot and inspect its first dual-play run, then `more` (command, why) pairs."""
    pairs = []
    if runs:
        pairs.append((f"pasodoble plot {_q(runs[0])}", "summary.png and one PNG per metric group, in plots/"))
        if (runs[0] / "samples.jsonl").is_file():
            pairs.append(
                (f"pasodoble inspect {_q(runs[0])}", "samples.html: the rollouts, question by question")
            )
    pairs += more
    width = max((len(command) for command, _ in pairs), default=0)
    return "\n".join(["next:", *(f"  {command:<{width}}  # {why}" for command, why in pairs)])


@contextlib.contextmanager
def stop_on_interrupt(loop, run_dir: Path) -> Iterator[None]:
    """First Ctrl-C: `loop.stop_requested` (checkpoint and stop after this step); second: KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if loop.stop_requested:
            raise KeyboardInterrupt
        loop.stop_requested = True
        print(
            f"\nCtrl-C: stopping after step {loop.state.step + 1} and writing a checkpoint in {run_dir}; "
            "press Ctrl-C again to stop now",
            flush=True,
        )

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except KeyboardInterrupt:
        print(f"\nstopped mid-step; {resume_hint(run_dir)}", flush=True)
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if loop.stop_requested:
        print(f"stopped at step {loop.state.step}; {resume_hint(run_dir)}", flush=True)
