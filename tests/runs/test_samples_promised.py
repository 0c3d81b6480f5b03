"""A run shorter than `samples_every` still writes its last step's samples, and the closing lines of `train` name
`samples.jsonl` and `pasodoble inspect` only when the file was written."""

from __future__ import annotations

import json

from pasodoble.runs.run_notes import train_finished
from tests.runs.test_resume import build_loop


def _finished(run_dir) -> str:
    return train_finished(run_dir, roles=["proposer", "solver"], tiers=None, solver_template="{question}")


def test_a_short_run_writes_its_last_steps_samples(tmp_path):
    loop, _ = build_loop(tmp_path / "run", steps=3)
    loop.schedule.samples_every = 5  # due at step 5, after the run's end
    loop.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert rows and {row["step"] for row in rows} == {3}
    text = _finished(tmp_path / "run")
    assert "samples.jsonl" in text and f"pasodoble inspect {tmp_path / 'run'}" in text


def test_no_samples_no_promise(tmp_path):
    loop, _ = build_loop(tmp_path / "run", steps=2)
    loop.schedule.samples_every = None
    loop.run()
    assert not (tmp_path / "run" / "samples.jsonl").exists()
    text = _finished(tmp_path / "run")
    assert "samples.jsonl" not in text and "pasodoble inspect" not in text
    assert f"pasodoble plot {tmp_path / 'run'}" in text


def test_demo_next_lines_plot_the_run_and_inspect_only_written_samples(tmp_path):
    from pasodoble.runs.run_notes import demo_next

    run = tmp_path / "demo" / "dualplay"
    run.mkdir(parents=True)
    tour = ("pasodoble train --config recipes/tiny-online.yaml run_dir=runs/tour", "the tour")
    text = demo_next([run], [tour])
    assert text.splitlines()[0] == "next:" and f"pasodoble plot {run}" in text and "inspect" not in text
    assert text.splitlines()[-1].endswith("# the tour")
    (run / "samples.jsonl").write_text("{}\n")
    assert f"pasodoble inspect {run}" in demo_next([run], [tour])
    assert demo_next([], [tour]).splitlines()[1].startswith("  pasodoble train")
