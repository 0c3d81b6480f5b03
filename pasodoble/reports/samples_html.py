"""`pasodoble inspect RUN_DIR`: the rollout samples of a run as one self-contained HTML page.

Why: `samples.jsonl` holds what the numbers in metrics.jsonl are about (which passage, which question, what the
Proposer claimed, what the Solver answered), but reading it raw is slow. The page shows, step by step, each
proposal: passage, question, the Proposer's answer, its pass rate, diversity and reward (or why it was invalid),
and the Solver's answers with their verdicts (identical answers shown once, with their count), with the
Proposer's full completion folded away.

How: one file, `RUN_DIR/samples.html` (or `--out`), inline CSS, no script and no external asset, so it opens from
disk in any browser and can be mailed or archived. Filters at the top (validity, reject reason, pass-rate band,
step) are radio buttons that CSS alone obeys (`body:has(#id:checked) .card:not(.class) { display: none }`, any
browser since 2023): each card carries one class per filter, and class names are indexes, never text from the run. Every text from the run is HTML-escaped: model outputs are
arbitrary text, and a question holding `<script>` must show as text, not run.
"""

from __future__ import annotations

import argparse
import html
from collections import defaultdict
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.io import read_jsonl, write_text_atomic

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
nav a { margin-right: .5em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em .8em; margin: .6em 0; }
.invalid { background: #fff4f0; } .learnable { border-left: 5px solid #1b9e77; }
.hard { border-left: 5px solid #d95f02; } .solved { border-left: 5px solid #7570b3; }
.meta { color: #555; font-size: .9em; } .meta strong { color: #222; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f6f6; padding: .4em; margin: .3em 0; }
.label { font-weight: 600; margin-top: .4em; }
ol { margin: .2em 0; padding-left: 2em; } li.ok::marker { content: "\\2713  "; color: #1b7e3e; }
li.wrong::marker { content: "\\2717  "; color: #b3261e; } li pre { display: inline-block; width: 90%; }
.filters { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ccc; padding: .3em 0; }
.filters div { margin: .15em 0; } .filters .name { display: inline-block; width: 5em; font-weight: 600; }
.filters label { margin-right: .8em; white-space: nowrap; }
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _band(row: dict, low: float) -> str:
    if row.get("invalid_reason"):
        return "invalid"
    p = row.get("pass_rate")
    if p is None:
        return ""
    return "hard" if p <= low else ("solved" if p >= 1 else "learnable")


def _number(row: dict, key: str, label: str) -> str:
    value = row.get(key)
    if not isinstance(value, (int, float)):
        return ""
    return f"{label} <strong>{value:.2f}</strong>"


def render_card(row: dict, low: float = 0.2, filters: str = "") -> str:
    """One proposal as an HTML card (every value escaped); `filters`: its filter classes (`filter_classes`)."""
    band = _band(row, low)
    facts = [
        _number(row, "pass_rate", "pass rate"),
        _number(row, "diversity", "diversity"),
        _number(row, "proposer_reward", "Proposer reward"),
    ]
    if row.get("invalid_reason"):
        facts.insert(0, f"invalid: <strong>{_e(row['invalid_reason'])}</strong>")
    parts = [
        f'<div class="card {band} {filters}">',
        f'<div class="meta">{" &middot; ".join(f for f in facts if f)}</div>',
    ]
    for key, label in (("passage", "Passage"), ("question", "Question"), ("answer", "Proposer's answer")):
        if row.get(key) not in (None, ""):
            parts.append(f'<div class="label">{label}</div><pre>{_e(row[key])}</pre>')
    answers, verdicts = row.get("solver_answers") or [], row.get("solver_correct") or []
    if answers:
        right = sum(bool(v) for v in verdicts)
        parts.append(f'<div class="label">Solver answers ({right} of {len(answers)} correct)</div><ol>')
        counts: dict[tuple[str, bool], int] = {}  # identical answers once, with their count, first seen first
        for i, text in enumerate(answers):
            key = (str(text), i < len(verdicts) and bool(verdicts[i]))
            counts[key] = counts.get(key, 0) + 1
        for (text, ok), n in counts.items():
            times = f'<span class="meta">&times;{n}</span> ' if n > 1 else ""
            parts.append(f'<li class="{"ok" if ok else "wrong"}">{times}<pre>{_e(text)}</pre></li>')
        parts.append("</ol>")
    if row.get("proposer_completion"):
        parts.append(
            "<details><summary>Proposer's full completion</summary>"
            f"<pre>{_e(row['proposer_completion'])}</pre></details>"
        )
    parts.append("</div>")
    return "\n".join(parts)


def _filter_options(steps: list[int], low: float, reasons: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Filter name -> its options as (class suffix, HTML label), in the order shown."""
    return {
        "validity": [("valid", "valid"), ("invalid", "invalid")],
        "reason": [(str(i), _e(reason)) for i, reason in enumerate(reasons)],
        "band": [
            ("hard", f"too hard (p &le; {low:g})"),
            ("learnable", f"learnable ({low:g} &lt; p &lt; 1)"),
            ("solved", "solved (p = 1)"),
        ],
        "step": [(str(step), str(step)) for step in steps],
    }


def filter_classes(row: dict, low: float, reasons: list[str]) -> str:
    """A card's classes, one per filter: `validity-valid`, `reason-<index>`, `band-learnable`, `step-<n>`."""
    reason = row.get("invalid_reason")
    classes = [f"validity-{'invalid' if reason else 'valid'}", f"step-{int(row.get('step', 0))}"]
    if reason:
        classes.append(f"reason-{reasons.index(str(reason))}")
    elif band := _band(row, low):
        classes.append(f"band-{band}")
    return " ".join(classes)


def _filters(options: dict[str, list[tuple[str, str]]], counts: dict[str, int]) -> tuple[str, str]:
    """(the filter form, the CSS rules that obey it): one radio group a filter, `all` checked."""
    rows, rules = [], []
    for name, values in options.items():
        if not values:
            continue
        radios = [f'<label><input type="radio" name="{name}" id="f-{name}-all" checked> all</label>']
        for value, label in values:
            ident = f"{name}-{value}"
            radios.append(
                f'<label><input type="radio" name="{name}" id="f-{ident}"> {label} ({counts.get(ident, 0)})</label>'
            )
            rules.append(f"body:has(#f-{ident}:checked) .card:not(.{ident}) {{ display: none; }}")
            if name == "step":
                rules.append(f"body:has(#f-{ident}:checked) h2:not(#step-{value}) {{ display: none; }}")
        rows.append(f'<div><span class="name">{name}</span> {" ".join(radios)}</div>')
    return '<form class="filters">' + "".join(rows) + "</form>", "\n".join(rules)


def render_page(rows: list[dict], title: str, low: float = 0.2) -> str:
    """The whole page: a header with counts, the filters, a step index, then the cards of each step."""
    steps = sorted({int(row.get("step", 0)) for row in rows})
    valid = [r for r in rows if not r.get("invalid_reason")]
    bands = defaultdict(int)
    for r in valid:
        bands[_band(r, low)] += 1
    summary = (
        f"{len(rows)} proposals over {len(steps)} logged steps; {len(valid)} valid: "
        f"{bands['hard']} too hard (pass rate &le; {low:g}), {bands['learnable']} learnable, "
        f"{bands['solved']} solved by every Solver answer."
    )
    reasons = sorted({str(r["invalid_reason"]) for r in rows if r.get("invalid_reason")})
    classes = [filter_classes(r, low, reasons) for r in rows]
    counts: dict[str, int] = defaultdict(int)
    for names in classes:
        for name in names.split():
            counts[name] += 1
    form, rules = _filters(_filter_options(steps, low, reasons), counts)
    nav = " ".join(f'<a href="#step-{s}">{s}</a>' for s in steps)
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{CSS}{rules}\n</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{summary} Left edge: green learnable, orange too hard, purple solved; red background: invalid.</p>",
        form,
        f"<nav>Steps: {nav}</nav>",
    ]
    cards: dict[int, list[str]] = defaultdict(list)
    for row, names in zip(rows, classes, strict=True):
        cards[int(row.get("step", 0))].append(render_card(row, low, names))
    for step in steps:
        body.append(f'<h2 id="step-{step}">Step {step}</h2>')
        body += cards[step]
    body.append("</body></html>")
    return "\n".join(body) + "\n"


def write_samples_page(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Read RUN_DIR/samples.jsonl and write the page; returns its path."""
    run_dir = Path(run_dir)
    samples = run_dir / "samples.jsonl"
    if not samples.is_file():
        raise UserError(
            f"{samples} not found; pass a run directory written by 'pasodoble train' "
            "(samples are logged every schedule.samples_every steps)"
        )
    rows = [r for r in read_jsonl(samples) if isinstance(r, dict)]
    if not rows:
        raise UserError(f"{samples} holds no samples yet; wait for the first schedule.samples_every step")
    low = _pass_rate_low(run_dir)
    out = Path(out) if out is not None else run_dir / "samples.html"
    write_text_atomic(out, render_page(rows, f"pasodoble samples: {run_dir.resolve().name}", low))
    return out


def _pass_rate_low(run_dir: Path) -> float:
    """The run's low pass-rate gate (rewards.pass_rate_low), 0.2 when config.yaml does not say."""
    import yaml

    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        value = config["rewards"]["pass_rate_low"]
        return float(value)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return 0.2


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="write a self-contained HTML page of a run's rollout samples",
        description="Render RUN_DIR/samples.jsonl (passage, question, answer, the Solver's answers with "
        "verdicts, rewards) as one HTML page with no external assets.",
    )
    p.add_argument("run_dir", type=Path, help="a run directory holding samples.jsonl")
    p.add_argument("--out", type=Path, help="output file (default: RUN_DIR/samples.html)")
    p.set_defaults(func=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    path = write_samples_page(args.run_dir, args.out)
    print(f"wrote {path} (open it in a browser: file://{path.resolve()})")
    return 0
