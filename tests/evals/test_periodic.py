"""In-training evaluation: the evaluator the dual-play loop calls every N steps, on a real tiny model."""

import json
from types import SimpleNamespace

import pytest

from pasodoble.errors import ConfigError
from pasodoble.evals.periodic import EvalConfig, SolverEvaluator


def test_config_needs_problems_and_a_known_metric():
    with pytest.raises(ConfigError, match="eval.problems_file"):
        EvalConfig().validate()
    with pytest.raises(ConfigError, match="eval.metric"):
        EvalConfig(problems_file="x.jsonl", metric="acc").validate()


def test_evaluator_logs_held_out_scores_and_tracks_the_best(tiny_lm, tmp_path):
    from pasodoble.grader import Grader
    from pasodoble.rollout import HFEngine

    model, tokenizer, _ = tiny_lm
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text(
        "".join(json.dumps({"question": f"{i}+{i}?", "answer": 2 * i}) + "\n" for i in range(5))
    )
    config = EvalConfig(
        problems_file=str(heldout), limit=3, max_new_tokens=4, samples_dir=str(tmp_path / "ev")
    )
    role = SimpleNamespace(engine=HFEngine(model, tokenizer), tokenizer=tokenizer)
    with Grader() as grader:
        evaluator = SolverEvaluator.from_config(config, grader)
        first = evaluator(role)
        second = evaluator(role)
    assert {"heldout/avg@k", "heldout/pass@k", "average/avg@k", "average/is_best"} <= set(first)
    assert first["average/is_best"] == 1.0 and second["average/is_best"] == 0.0  # equal score is not better
    assert evaluator.best == (1, first["average/avg@k"]) and evaluator.calls == 2
    assert len((tmp_path / "ev" / "eval-2.jsonl").read_text().splitlines()) == 3


def test_eval_config_carries_top_k_and_min_p_into_the_settings():
    settings = EvalConfig(problems_file="x.jsonl", temperature=0.6, top_k=20, min_p=0.05).settings()
    assert (settings.top_k, settings.min_p) == (20, 0.05)
    assert (EvalConfig().settings().top_k, EvalConfig().settings().min_p) == (None, None)


def test_eval_config_rejects_bad_sampling_fields_at_validation():
    with pytest.raises(ConfigError, match="top_k"):
        EvalConfig(problems_file="x.jsonl", top_k=-3).validate()
    with pytest.raises(ConfigError, match="min_p"):
        EvalConfig(problems_file="x.jsonl", min_p=1.0).validate()
