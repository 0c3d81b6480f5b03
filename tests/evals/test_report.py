"""results.json, the paper-layout Markdown table and the merge of several runs."""

import pytest

from pasodoble.errors import UserError
from pasodoble.evals.metrics import average_sources
from pasodoble.evals.report import (
    build_results,
    grading_line,
    merge_tables,
    read_results,
    scores_table,
    write_run_outputs,
)
from pasodoble.evals.runner import EvalReport, EvalSettings, settings_dict


def _result(label, scores, **settings):
    per = {
        s: {"avg@k": v, "pass@k": v, "maj@k": v, "ci95": 0.01, "n": 10.0, "k": 2.0} for s, v in scores.items()
    }
    report = EvalReport(per_source=per, average=average_sources(per), seconds=1.5, samples_generated=40)
    return build_results(
        report, settings_dict(EvalSettings(**settings)), label=label, model=f"models/{label}"
    )


def test_table_has_paper_layout_and_fixed_column_order():
    table = scores_table([_result("base", {"olympiadbench": 0.1, "gsm8k": 0.5})])
    header, rule, row = table.splitlines()
    assert header == "| Model | GSM8K | OlympiadBench | AVG |"
    assert row == "| base | 50.00 | 10.00 | 30.00 |"
    with pytest.raises(UserError):
        scores_table([_result("base", {"gsm8k": 0.5})], metric="acc")


def test_run_outputs_record_template_sampling_seed_and_versions(tmp_path):
    result = _result(
        "sft", {"aime24": 0.25}, num_samples=6, temperature=0.6, seed=7, prompt_template="Q: {question}"
    )
    write_run_outputs(tmp_path, result)
    back = read_results(tmp_path)
    assert back["settings"]["seed"] == 7 and back["settings"]["prompt_template"] == "Q: {question}"
    assert {"python", "torch", "transformers", "pasodoble"} <= set(back["versions"])
    md = (tmp_path / "results.md").read_text()
    for needle in (
        "| sft | 25.00 | 25.00 |",
        "temperature=0.6",
        "seed=7",
        "Q: {question}",
        "avg@6",
        "transformers",
    ):
        assert needle in md


def test_merge_lists_rows_missing_cells_and_differing_settings(tmp_path):
    a = _result("base", {"gsm8k": 0.2, "aime24": 0.0})
    b = _result("online", {"gsm8k": 0.4}, temperature=0.6)
    merged = merge_tables([a, b])
    lines = merged.splitlines()
    assert lines[0] == "| Model | AIME24 | GSM8K | AVG |"
    assert lines[2] == "| base | 0.00 | 20.00 | 10.00 |"
    assert lines[3] == "| online | - | 40.00 | 40.00 |"
    assert "Settings differ between runs: temperature" in merged
    with pytest.raises(UserError, match="results.json: not found"):
        read_results(tmp_path / "nope")


def test_paper_average_column_when_minerva_is_added():
    six = {"aime24": 0.1, "aime25": 0.1, "amc23": 0.1, "gsm8k": 0.1, "math500": 0.1, "olympiadbench": 0.1}
    table = scores_table([_result("m", {**six, "minerva_math": 0.8}), _result("p", six)])
    header, _, with_minerva, paper_only = table.splitlines()
    assert header.endswith("| Minerva | OlympiadBench | AVG | AVG (paper 6) |")
    assert with_minerva.endswith("| 80.00 | 10.00 | 20.00 | 10.00 |")
    assert paper_only.endswith("| - | 10.00 | 10.00 | 10.00 |")


def test_grading_line_names_what_needs_a_look(tmp_path):
    clean = {
        "grader/checks": 1200,
        "grader/timeouts": 0,
        "grader/partial_parses": 0,
        "eval/prompts_truncated": 3,
    }
    assert grading_line(clean) == "Grading: 1,200 checks; no failures."
    counters = {**clean, "grader/no_answer": 7, "grader/gold_partial_parses": 6}
    assert grading_line(counters) == (
        "Grading: 1,200 checks; 7 responses without an answer; "
        "6 checks against a gold math-verify read only in part."
    )
    result = _result("base", {"gsm8k": 0.5})
    result["counters"] = counters
    write_run_outputs(tmp_path, result)
    assert "6 checks against a gold math-verify read only in part" in (tmp_path / "results.md").read_text()


def test_settings_block_states_top_k_and_min_p_also_for_results_that_predate_them():
    from pasodoble.evals.report import settings_block

    assert "top_k=20, min_p=0.05" in settings_block(
        _result("a", {"gsm8k": 0.5}, temperature=0.6, top_k=20, min_p=0.05)
    )
    old = _result("b", {"gsm8k": 0.5}, temperature=0.6)
    del old["settings"]["top_k"], old["settings"]["min_p"]  # results.json written before the fields existed
    assert "top_k=50 (unrecorded default), min_p=None" in settings_block(old)
