"""`pasodoble plot` writes `summary.png` for a run with a real loop's full metric set: the DualPlay loop's own rows
(more than 12 metrics a role, so the per-group PNGs are `proposer-1.png`, `proposer-2.png`, ...) and held-out
evaluation rows under the periodic evaluator's names. Every panel that has data in such a run draws it."""

from __future__ import annotations

import pytest

from pasodoble.cli import main
from pasodoble.reports.tracking import Tracker
from tests.runs.test_resume import build_loop


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "real-run"
    loop, _ = build_loop(run, steps=3)
    loop.run()
    with Tracker(run) as tracker:  # what schedule.eval_every adds (evals/periodic.py's names)
        for step, score in ((1, 0.25), (3, 0.5)):
            tracker.log({"eval/heldout/avg@k": score, "eval/average/avg@k": score}, step)
    return run


def test_summary_is_written_and_every_panel_with_data_draws_it(real_run, monkeypatch):
    import matplotlib.figure

    figures = []
    original = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert main(["plot", str(real_run)]) == 0
    plots = real_run / "plots"
    assert (plots / "proposer-1.png").is_file() and not (plots / "proposer.png").exists()
    assert (plots / "summary.png").read_bytes()[:4] == b"\x89PNG"
    fig = next(
        f for f in figures if f._suptitle is not None and f._suptitle.get_text().startswith("real-run")
    )
    a, b, c, d, e, f = fig.axes
    assert {line.get_label() for line in a.get_lines()} >= {"reward (mean)", "part: pass rate p"}
    assert len(b.collections) == 3  # too hard / learnable / solved over the steps
    assert c.get_lines() and e.get_lines()  # valid fraction; the Solver's reward and accuracy
    assert {line.get_label() for line in e.get_lines()} == {"reward (mean)", "answers correct"}
    assert {line.get_label() for line in f.get_lines()} == {"heldout", "average"}
    assert all(len(line.get_xdata()) == 2 for line in f.get_lines())  # the two evaluation points
