"""`evaluate` on a real (random) tiny Qwen3: prompts, streaming, resume without duplicates, determinism."""

import json

import pytest

from pasodoble.evals import EvalSettings, Problem, evaluate
from pasodoble.evals.runner import render_prompt

PROBLEMS = [
    Problem(id=str(i), question=f"What is {i} + {i}?", answers=(str(2 * i),), source="toy") for i in range(5)
]
SAMPLED = EvalSettings(num_samples=2, temperature=1.0, max_new_tokens=6, seed=3, chunk_size=2)


@pytest.fixture(scope="module")
def grader():
    from pasodoble.grader import Grader

    with Grader() as g:
        yield g


@pytest.fixture(scope="module")
def engine(tiny_lm):
    from pasodoble.rollout import HFEngine

    model, tokenizer, _ = tiny_lm
    return HFEngine(model, tokenizer, batch_size=8)


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_render_prompt_chat_plain_system_and_truncation(tiny_lm):
    _, tok, _ = tiny_lm
    settings = EvalSettings(prompt_template="Q: {question} \\boxed{}", system_prompt="Be brief.")
    text, ids, cut = render_prompt("1+1?", settings, tok)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ: 1+1? \\boxed{}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(ids) == text and not cut
    plain = EvalSettings(prompt_template="Q: {question}", use_chat_template=False, max_prompt_length=4)
    text, ids, cut = render_prompt("1+1?", plain, tok)
    assert text == "1+1?" and cut and tok.decode(ids) == "1+1?"  # the end of the prompt is kept


def test_streams_every_sample_with_its_verdict(engine, tiny_lm, grader, tmp_path):
    path = tmp_path / "samples.jsonl"
    report = evaluate(engine, tiny_lm[1], PROBLEMS, SAMPLED, grader, samples_path=path, progress=False)
    rows = _rows(path)
    assert [(r["id"], r["sample"]) for r in rows] == [(str(i), j) for i in range(5) for j in range(2)]
    for r in rows:
        assert r["prompt"].endswith("<|im_start|>assistant\n") and "What is" in r["prompt"]
        assert r["status"] in {"ok", "no_answer", "timeout", "error"} and isinstance(r["correct"], bool)
        assert 1 <= r["num_tokens"] <= 6 and r["finish_reason"] in {"stop", "length"}
    assert report.samples_generated == 10 and report.per_source["toy"]["n"] == 5
    assert set(report.to_metrics()) >= {"eval/toy/avg@k", "eval/average/pass@k", "eval/toy/ci95"}


def test_interrupted_run_resumes_to_the_same_samples(engine, tiny_lm, grader, tmp_path):
    full = tmp_path / "full.jsonl"
    evaluate(engine, tiny_lm[1], PROBLEMS, SAMPLED, grader, samples_path=full, progress=False)
    cut = tmp_path / "cut.jsonl"
    lines = full.read_text().splitlines(keepends=True)
    cut.write_text(
        "".join(lines[:6]) + lines[6][:25]
    )  # 3 problems done (chunk 2 half done), then a torn write
    report = evaluate(engine, tiny_lm[1], PROBLEMS, SAMPLED, grader, samples_path=cut, progress=False)
    assert report.counters["eval/torn_lines"] == 1 and report.counters["eval/resumed_problems"] == 3
    assert report.samples_generated == 4
    key = lambda r: (r["id"], r["sample"])  # noqa: E731
    resumed, expected = sorted(_rows(cut), key=key), sorted(_rows(full), key=key)
    assert [key(r) for r in resumed] == [key(r) for r in expected]  # nothing lost, nothing duplicated
    assert [r["response"] for r in resumed] == [r["response"] for r in expected]  # same seeds, same text
    again = evaluate(engine, tiny_lm[1], PROBLEMS, SAMPLED, grader, samples_path=cut, progress=False)
    assert again.samples_generated == 0 and len(_rows(cut)) == 10


def test_different_seed_changes_samples_and_greedy_ignores_it(engine, tiny_lm, grader, tmp_path):
    def texts(settings, name):
        evaluate(
            engine, tiny_lm[1], PROBLEMS[:2], settings, grader, samples_path=tmp_path / name, progress=False
        )
        return [r["response"] for r in _rows(tmp_path / name)]

    assert texts(SAMPLED, "a") != texts(EvalSettings(**{**SAMPLED.__dict__, "seed": 4}), "b")
    greedy = EvalSettings(max_new_tokens=6, seed=1)
    assert texts(greedy, "c") == texts(EvalSettings(max_new_tokens=6, seed=2), "d")


def test_a_sample_is_correct_if_it_matches_any_accepted_gold(grader):
    from collections import Counter

    from pasodoble.evals.runner import _grade

    problems = [Problem("a", "q", ("3", "4"), "s"), Problem("b", "q", ("\\frac{1}{2}",), "s")]
    texts = [["so \\boxed{4}", "\\boxed{5}"], ["\\boxed{0.5}", "no box"]]
    counters = Counter()
    graded = _grade(grader, problems, texts, counters)
    assert [[g["correct"] for g in rows] for rows in graded] == [[True, False], [True, False]]
    assert graded[0][0]["extracted"] == "4" and graded[1][1]["status"] == "no_answer"
    assert counters["grader/checks"] == 8  # each response is checked against both alternatives


def test_saves_each_problem_as_its_samples_finish_not_per_chunk(tiny_lm, grader, tmp_path):
    """One chunk of 5 problems x 2 samples in batches of 2 sequences: each batch finishes a problem, which is on
    disk before the next batch starts; killed after the third batch, the rerun keeps those and redoes the rest."""
    from pasodoble.rollout import HFEngine

    model, tok, _ = tiny_lm
    settings = EvalSettings(num_samples=2, temperature=1.0, max_new_tokens=6, seed=3, chunk_size=5)
    whole = tmp_path / "whole.jsonl"
    evaluate(
        HFEngine(model, tok, batch_size=2),
        tok,
        PROBLEMS,
        settings,
        grader,
        samples_path=whole,
        progress=False,
    )
    path = tmp_path / "cut.jsonl"
    seen = []

    class Killed(Exception):
        pass

    class Watching(HFEngine):
        def generate(self, prompt_ids, sampling, on_batch=None, on_progress=None):
            def watch(first, completions):
                on_batch(first, completions)
                seen.append(len(_rows(path)))
                if len(seen) == 3:
                    raise Killed

            return super().generate(prompt_ids, sampling, watch, on_progress)

    with pytest.raises(Killed):
        evaluate(
            Watching(model, tok, batch_size=2),
            tok,
            PROBLEMS,
            settings,
            grader,
            samples_path=path,
            progress=False,
        )
    assert seen == [2, 4, 6]  # rows on disk after each batch: one more problem (2 samples) each time
    report = evaluate(
        HFEngine(model, tok, batch_size=2), tok, PROBLEMS, settings, grader, samples_path=path, progress=False
    )
    assert report.counters["eval/resumed_problems"] == 3 and report.samples_generated == 4
    assert _rows(path) == _rows(whole)


def test_progress_bar_counts_samples_zero_to_n_as_they_finish(tiny_lm, grader, monkeypatch):
    import pasodoble.evals.runner as runner
    from pasodoble.rollout import HFEngine

    bars = []

    class Bar:
        def __init__(self, total, initial, **kwargs):
            self.total, self.n, self.updates = total, initial, []
            bars.append(self)

        def update(self, k):
            self.n += k
            self.updates.append(k)

        def close(self):
            pass

    monkeypatch.setattr(runner, "progress_bar", Bar)
    model, tok, _ = tiny_lm
    settings = EvalSettings(num_samples=2, temperature=1.0, max_new_tokens=6, seed=3, chunk_size=5)
    evaluate(HFEngine(model, tok, batch_size=4), tok, PROBLEMS, settings, grader)
    (bar,) = bars
    assert bar.total == 10 and bar.n == 10  # 0 to N samples
    assert len([u for u in bar.updates if u]) >= 3  # moved within each engine call, not once per chunk
