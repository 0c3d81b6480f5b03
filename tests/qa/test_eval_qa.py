"""`pasodoble eval --grading qa` on QA files of our own: EM and F1 equal SQuAD v1.1's definitions, resumably.

The reference below is written from the SQuAD v1.1 evaluation script's definition (normalise: lower-case, delete
ASCII punctuation, drop a/an/the, collapse whitespace; EM and token F1 per gold, the max over golds, the mean over
questions, in percent), independently of `pasodoble.qa`.
"""

import json
import re
import string
from collections import Counter

import pytest

from pasodoble.cli import main
from pasodoble.evals.problems import FieldMap, load_problems_file


def _ref_normalize(s):
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _ref_f1(prediction, gold):
    p, g = _ref_normalize(prediction).split(), _ref_normalize(gold).split()
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def _ref_scores(predictions, golds):
    em = [max(float(_ref_normalize(predictions[q]) == _ref_normalize(g)) for g in golds[q]) for q in golds]
    f1 = [max(_ref_f1(predictions[q], g) for g in golds[q]) for q in golds]
    return 100 * sum(em) / len(em), 100 * sum(f1) / len(f1)


QUESTIONS = [f"Which river rises in the hills of Tarsk number {i}?" for i in range(6)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _eval(model, data, out, *extra):
    args = ["eval", "--model", str(model), "--dataset", str(data), "--grading", "qa", "--id-field", "qid"]
    args += ["--answer-field", "answer.value", "--alias-field", "answer.aliases", "--max-new-tokens", "12"]
    args += [
        "--temperature",
        "1.0",
        "--seed",
        "3",
    ]  # sampled with a fixed seed: varied, and the same on rerun
    return main([*args, "--out", str(out), "--no-progress", *extra])


def _samples(out):
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_alias_field_and_dotted_fields_build_the_golds(tmp_path):
    path = _write(
        tmp_path / "trivia.jsonl",
        [{"qid": "a", "q": "Capital?", "answer": {"value": "Paris", "aliases": ["City of Light", "Paris"]}}],
    )
    fields = FieldMap(question_field="q", answer_field="answer.value", alias_field="answer.aliases")
    (problem,) = load_problems_file(path, fields)
    assert problem.answers == ("Paris", "City of Light")


def test_eval_reports_squad_em_and_f1_on_our_own_file(tiny_lm, tmp_path, capsys):
    """A first run shows what the tiny model answers; golds are then built around those answers (exact, via
    an alias only, a partial overlap, a miss) so EM and F1 are neither 0 nor 100, and the second run must report
    exactly the reference numbers."""
    probe = _write(
        tmp_path / "probe.jsonl",
        [
            {"qid": f"q{i}", "question": q, "answer": {"value": "x", "aliases": []}}
            for i, q in enumerate(QUESTIONS)
        ],
    )
    assert _eval(tiny_lm[2], probe, tmp_path / "probe") == 0
    said = {r["id"]: r["extracted"] or "" for r in _samples(tmp_path / "probe")}
    words = {q: _ref_normalize(a).split() for q, a in said.items()}
    assert sum(bool(w) for w in words.values()) >= 4, said  # enough non-empty answers to build golds around
    golds, i = {}, 0
    for qid, answer in said.items():
        if not words[qid]:  # nothing left after normalisation: SQuAD's EM counts "" == "" but its F1 gives 0
            golds[qid] = ["zzz qqq vvv"]
            continue
        i += 1
        if i % 4 == 0:
            golds[qid] = [answer.upper() + "!", "zzz qqq"]  # exact after normalisation
        elif i % 4 == 1:
            golds[qid] = ["zzz qqq", f"The {answer}"]  # exact through an alias
        elif i % 4 == 2:
            golds[qid] = [" ".join(words[qid][:1] + ["qqq", "vvv"]) or "zzz"]  # partial overlap
        else:
            golds[qid] = ["zzz qqq vvv"]  # a miss
    rows = [
        {"qid": qid, "question": QUESTIONS[i], "answer": {"value": golds[qid][0], "aliases": golds[qid][1:]}}
        for i, qid in enumerate(said)
    ]
    data = _write(tmp_path / "mine.jsonl", rows)
    out = tmp_path / "run"
    assert _eval(tiny_lm[2], data, out) == 0
    samples = {r["id"]: r for r in _samples(out)}
    assert {q: r["extracted"] or "" for q, r in samples.items()} == said  # the same seed: the same answers
    em, f1 = _ref_scores(said, golds)
    result = json.loads((out / "results.json").read_text())
    scores = result["per_source"]["mine"]
    assert 0 < em < 100 and 0 < f1 < 100 and f1 > em
    assert 100 * scores["em"] == pytest.approx(em) and 100 * scores["f1"] == pytest.approx(f1)
    assert scores["em"] == scores["avg@k"] and result["average"]["f1"] == scores["f1"]
    printed = capsys.readouterr().out
    assert f"{f1:.2f}" in printed and f"{em:.2f}" in printed and "F1 (%)" in printed
    assert "| EM | F1 |" in (out / "results.md").read_text()
    # resumed: nothing is generated again and the scores are the same
    (out / "results.json").unlink()
    assert _eval(tiny_lm[2], data, out) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["samples_generated"] == 0 and again["per_source"] == result["per_source"]
    # the grading is part of the run's identity: the math grader may not resume a QA run
    assert _eval(tiny_lm[2], data, out, "--grading", "math") == 2


def test_qa_grader_speaks_the_grader_protocol_with_each_rule():
    from pasodoble.qa.grading import QAGrader

    with QAGrader("triviaqa") as grader:
        batch = grader.grade(["Saint Denis", "Paris"], ["Answer: Saint-Denis", "<think>unclosed"])
    assert [v.correct for v in batch.verdicts] == [True, False]
    assert batch.verdicts[1].status == "no_answer" and batch.counters == {"checks": 2, "no_answer": 1}
    assert not QAGrader("squad").grade(["Saint Denis"], ["Saint-Denis"]).verdicts[0].correct
    with pytest.raises(ValueError, match="canonical"):
        QAGrader("exact")


def test_dotted_fields_reach_squad_style_rows_in_every_role(tmp_path):
    row = {
        "meta": {"qid": "s1", "split": "dev"},
        "q": {"text": "Where?"},
        "answers": {"text": ["Paris", "Paris"]},
    }
    path = _write(tmp_path / "squad.jsonl", [row])
    fields = FieldMap(
        question_template="Q: {q.text}",
        answer_field="answers.text",
        id_field="meta.qid",
        source_field="meta.split",
    )
    (problem,) = load_problems_file(path, fields)
    assert (problem.id, problem.question, problem.answers, problem.source) == (
        "s1",
        "Q: Where?",
        ("Paris", "Paris"),
        "squad/dev",
    )
    with pytest.raises(Exception, match="answers.txt"):
        load_problems_file(path, FieldMap(question_field="q.text", answer_field="answers.txt"))
