"""Evaluation outputs: results.json, a Markdown table in the paper's layout, and the merge of several runs.

Why: users of peers' code cannot reproduce scores because templates, seeds and sampling settings are not kept
beside them. Every run directory here holds results.json with the exact prompt template, sampling settings, seed,
engine and package versions, and results.md renders the same facts under the table.

Layout (as in the paper): one row per model, one column per benchmark, then AVG; scores are percentages of the
chosen metric (avg@k by default = pass@1 as the mean over k samples). `pasodoble eval-table RUN_DIR...` merges runs
(base vs SFT vs online vs offline) into one table and lists any setting on which the runs differ.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from pasodoble.errors import UserError
from pasodoble.evals.benchmarks import BENCHMARKS, PAPER_BENCHMARKS
from pasodoble.io import write_json_atomic, write_text_atomic

DISPLAY_NAMES = {
    "aime24": "AIME24",
    "aime25": "AIME25",
    "amc23": "AMC23",
    "gsm8k": "GSM8K",
    "math500": "MATH-500",
    "minerva_math": "Minerva",
    "olympiadbench": "OlympiadBench",
}
METRICS = ("avg@k", "pass@k", "maj@k", "em", "f1")  # em, f1: QA-graded runs only
_PACKAGES = ("pasodoble", "torch", "transformers", "math-verify", "vllm")


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide the generated text and the grading."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name == "pasodoble":
                from pasodoble import __version__

                versions[name] = __version__
    return versions


def build_results(
    report, settings: dict[str, Any], *, label: str, model: str, extra: dict | None = None
) -> dict:
    """The results.json document of one run."""
    return {
        "label": label,
        "model": model,
        "settings": settings,
        "per_source": report.per_source,
        "average": report.average,
        "counters": report.counters,
        "seconds": round(report.seconds, 3),
        "samples_generated": report.samples_generated,
        "versions": package_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(extra or {}),
    }


def _ordered_sources(results: Sequence[dict]) -> list[str]:
    present = {s for r in results for s in r["per_source"]}
    return [s for s in BENCHMARKS if s in present] + sorted(present - set(BENCHMARKS))


def scores_table(results: Sequence[dict], metric: str = "avg@k") -> str:
    """Markdown: one row per run (its label), one column per benchmark, then AVG over that row's benchmarks.

    When a row has the paper's six sets and more (Minerva), an extra "AVG (paper 6)" column keeps the paper's
    average comparable.
    """
    if metric not in METRICS:
        raise UserError(f"--metric: {metric!r} is not one of {', '.join(METRICS)}")
    sources = _ordered_sources(results)
    paper6 = any(set(PAPER_BENCHMARKS) < set(r["per_source"]) for r in results)
    header = [
        "Model",
        *(DISPLAY_NAMES.get(s, s) for s in sources),
        "AVG",
        *(["AVG (paper 6)"] if paper6 else []),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        per = r["per_source"]
        cells = [
            r["label"],
            *(f"{100 * per[s][metric]:.2f}" if metric in per.get(s, {}) else "-" for s in sources),
        ]
        cells.append(f"{100 * r['average'][metric]:.2f}" if metric in r["average"] else "-")
        if paper6:
            has_six = set(PAPER_BENCHMARKS) <= set(per)
            six = sum(per[s][metric] for s in PAPER_BENCHMARKS) / len(PAPER_BENCHMARKS) if has_six else None
            cells.append(f"{100 * six:.2f}" if six is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(result: dict) -> str:
    """Markdown: every metric of one run per benchmark, with the 95% interval and the problem count."""
    k = int(result["settings"]["num_samples"])
    qa = "f1" in result["average"]  # a QA-graded run adds the EM and F1 columns of QA harnesses
    head = f"| Benchmark | n | avg@{k} | ±95% | pass@{k} | maj@{k} |" + (" EM | F1 |" if qa else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for source, m in [*result["per_source"].items(), ("AVG", result["average"])]:
        name = DISPLAY_NAMES.get(source, source)
        lines.append(
            f"| {name} | {int(m['n'])} | {100 * m['avg@k']:.2f} | {100 * m['ci95']:.2f} "
            f"| {100 * m['pass@k']:.2f} | {100 * m['maj@k']:.2f} |"
            + (f" {100 * m['em']:.2f} | {100 * m['f1']:.2f} |" if qa else "")
        )
    return "\n".join(lines)


def settings_block(result: dict) -> str:
    """The facts needed to reproduce a run, in Markdown."""
    s = result["settings"]
    # results written before top_k / min_p were recorded sampled with transformers' default top-k of 50
    top_k = s.get("top_k", "50 (unrecorded default)" if s["temperature"] > 0 else None)
    template = s["prompt_template"].replace("```", "'''")
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    lines = [
        f"- model: `{result['model']}`",
        f"- engine: {result.get('engine', 'hf')}; chat template: {s['use_chat_template']}; "
        f"system prompt: {s['system_prompt']!r}",
        f"- sampling: k={s['num_samples']}, temperature={s['temperature']}, top_p={s['top_p']}, "
        f"top_k={top_k}, min_p={s.get('min_p')}, "
        f"max_new_tokens={s['max_new_tokens']}, max_prompt_length={s['max_prompt_length']}, seed={s['seed']}, "
        f"chunk_size={s['chunk_size']}",
        f"- versions: {versions}",
    ]
    if result.get("arguments"):
        flags = " ".join(
            f"{k}={v}" for k, v in result["arguments"].items() if k not in s and v not in (None, False)
        )  # the settings are listed above; these are the data, engine and grader choices
        lines.append(f"- arguments: `{flags}`")
    lines += ["- prompt template:", "", "```text", template, "```"]
    return "\n".join(lines)


_GRADING_ISSUES = (  # grader counters a reader of the scores should see, with how to read them
    ("no_answer", "responses without an answer"),
    ("timeouts", "checks past the time limit (graded wrong)"),
    ("wall_timeouts", "checks whose worker hung, stopped by the wall-clock backstop (graded wrong)"),
    ("errors", "checks that failed (graded wrong)"),
    ("partial_parses", "answers math-verify read only in part"),
    ("gold_partial_parses", "checks against a gold math-verify read only in part"),
)


def grading_line(counters: dict[str, Any]) -> str:
    """One Markdown line on how the scores were graded: checks, and every grader counter that needs a look."""
    checks = int(counters.get("grader/checks", 0))
    issues = [
        f"{int(counters[f'grader/{name}']):,} {what}"
        for name, what in _GRADING_ISSUES
        if counters.get(f"grader/{name}", 0)
    ]
    return f"Grading: {checks:,} checks; " + ("; ".join(issues) if issues else "no failures") + "."


def render_run_markdown(result: dict) -> str:
    return "\n\n".join(
        [
            f"# Evaluation: {result['label']}",
            scores_table([result]),
            detail_table(result),
            grading_line(result.get("counters", {})),
            "## Settings\n\n" + settings_block(result),
        ]
    )


def write_run_outputs(out_dir: Path, result: dict) -> None:
    write_json_atomic(out_dir / "results.json", result)
    write_text_atomic(out_dir / "results.md", render_run_markdown(result) + "\n")


def read_results(run_dir: str | Path) -> dict:
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        raise UserError(f"{path}: not found; pass directories written by 'pasodoble eval --out DIR'")
    return json.loads(path.read_text(encoding="utf-8"))


def unique_labels(results: Sequence[dict], run_dirs: Sequence[str | Path]) -> list[str]:
    """Row labels for a merged table, one per run and never two alike: a label shared by several runs gets its
    run folder added (`label (eval-online)`), and a number if even that repeats."""
    labels = [str(r.get("label") or r.get("model") or Path(d).name) for r, d in zip(results, run_dirs)]
    shared = {x for x in labels if labels.count(x) > 1}
    labels = [f"{x} ({Path(d).name})" if x in shared else x for x, d in zip(labels, run_dirs)]
    seen: dict[str, int] = {}
    out = []
    for x in labels:
        seen[x] = seen.get(x, 0) + 1
        out.append(x if labels.count(x) == 1 else f"{x} #{seen[x]}")
    return out


def merge_tables(results: Sequence[dict], metric: str = "avg@k") -> str:
    """One table for several runs, plus a note on every setting that differs between them."""
    table = scores_table(results, metric)
    differing = [
        key
        for key in results[0]["settings"]
        if len({json.dumps(r["settings"].get(key), sort_keys=True) for r in results}) > 1
    ]
    k_values = sorted({int(r["settings"]["num_samples"]) for r in results})
    notes = [f"Metric: {metric} (k = {', '.join(map(str, k_values))}), in percent."]
    if differing:
        notes.append(
            "Settings differ between runs: " + ", ".join(differing) + " (see each run's results.md)."
        )
    return table + "\n\n" + "\n".join(notes)
