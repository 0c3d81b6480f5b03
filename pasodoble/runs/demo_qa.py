"""`pasodoble demo-qa`: the tiny QA world end to end on a CPU, the `qa` domain's claim in miniature.

Phases: the cold start (`world/qa_models.py`: tokenizer, tiny base, SFT of one joint model or of each role on
its own records, the Solver's on `sft`-tier facts only; cached) -> the SFT Solver's closed-book accuracy on each
tier of held-out facts (`sft`, `corpus`: stated only in the corpus, `multihop`: two corpus facts composed), greedy
and sampled -> for each seed in `seeds`, an online dual-play run (`train`, a `TrainConfig` with `domain: qa`; the
demo fills in each role's model, the corpus and the seed) and/or (`conditions`) the same run with a random Solver
reward (`rewards.solver_reward=random`) -> each final Solver evaluated the same way -> `RUN_DIR/results.md`: per
condition and tier, accuracy before and after, the mean over seeds and each seed. The question it answers: does
dual-play teach a closed-book Solver corpus facts it was never given, beyond what a random reward does?

    RUN_DIR/config.yaml                       the resolved config (rerun with --config)
    RUN_DIR/eval/sft/                         the SFT Solver's evaluation (greedy/, sampled/, summary.json)
    RUN_DIR/<condition>-seed<S>/              the dual-play run (metrics.jsonl, samples.jsonl, checkpoints/)
    RUN_DIR/eval/<condition>-seed<S>/         its final Solver's evaluation
    RUN_DIR/results.md, results.json          the table, and the valid proposals of each run by the tier of the
                                              fact they ask (from samples.jsonl: set schedule.samples_every: 1 to
                                              count them all) with the Solver's pass rate on them

Run: `pasodoble demo-qa --config recipes/tiny-qa.yaml [--out DIR] [key=value ...]` (the command line and
`QADemoConfig` are in `demo_cli.py` and `demo_config.py`, read and checked before torch loads); figures in docs/QA.md.
"""

from __future__ import annotations

import copy
import json
import logging
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.checkpoint import latest_checkpoint
from pasodoble.config import save_config
from pasodoble.evals import EvalSettings, Problem, evaluate
from pasodoble.evals.report import build_results, write_run_outputs
from pasodoble.evals.runner import settings_dict
from pasodoble.io import read_jsonl, write_json_atomic, write_text_atomic
from pasodoble.qa.grading import QAGrader
from pasodoble.qa.normalize import canonical
from pasodoble.qa.world import TIERS
from pasodoble.rollout import HFEngine
from pasodoble.runs.demo_config import CONDITIONS
from pasodoble.runs.demo_config import QADemoConfig as QADemoConfig  # re-exported: read without torch
from pasodoble.runs.run_notes import demo_next
from pasodoble.runs.train import TrainConfig, run_train
from pasodoble.sft.qa_models import ensure_qa_models

log = logging.getLogger("pasodoble.runs.demo_qa")


def load_heldout(path: Path) -> list[Problem]:
    """The world's held-out facts as QA problems (answer and aliases as golds), source = tier."""
    return [
        Problem(row["id"], row["question"], (row["answer"], *row["aliases"]), row["tier"])
        for row in read_jsonl(path)
    ]


def evaluate_tiers(model_dir: Path, problems: list[Problem], cfg: QADemoConfig, out: Path) -> dict:
    """Greedy accuracy and sampled avg@k per tier (canonical exact match over answer and aliases)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = HFEngine(
        AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, batch_size=cfg.eval.batch_size
    )
    ev, summary = cfg.eval, {}
    runs = {
        "greedy": EvalSettings(num_samples=1, temperature=0.0, seed=ev.seed),
        "sampled": EvalSettings(num_samples=ev.num_samples, temperature=ev.temperature, seed=ev.seed),
    }
    with QAGrader("canonical") as grader:
        for name, settings in runs.items():
            settings.max_new_tokens = ev.max_new_tokens
            settings.prompt_template = cfg.train.prompts.solver_template
            settings.system_prompt = cfg.train.prompts.solver_system
            settings.chunk_size = max(1, ev.batch_size // settings.num_samples)
            (out / name).mkdir(parents=True, exist_ok=True)
            samples = out / name / "samples.jsonl"
            samples.unlink(missing_ok=True)
            report = evaluate(
                engine, tokenizer, problems, settings, grader, samples_path=samples, progress=False
            )
            result = build_results(
                report, settings_dict(settings), label=f"solver ({name})", model=str(model_dir)
            )
            write_run_outputs(out / name, result)
            summary[name] = {tier: result["per_source"][tier]["avg@k"] for tier in TIERS}
    write_json_atomic(out / "summary.json", summary)
    return summary


def train_config(cfg: QADemoConfig, models, condition: str, seed: int, run_dir: Path) -> TrainConfig:
    """The dual-play run of one (condition, seed): the recipe's `train`, with models, corpus and seed filled in."""
    train = copy.deepcopy(cfg.train)
    train.run_dir, train.seed = str(run_dir), seed
    train.proposer.model, train.solver.model = str(models.proposer_dir), str(models.solver_dir)
    train.knowledge.path = str(models.world_dir / "corpus.jsonl")
    train.knowledge.seed = seed
    train.rewards.solver_reward = CONDITIONS[condition]
    train.logging.quiet = True
    train.validate()
    return train


def results_table(before: dict, after: dict[str, dict[int, dict]]) -> str:
    """Markdown: per condition and tier, greedy accuracy before, after (mean over seeds and each seed), change."""
    lines = [
        "| Condition | Tier | SFT start | After: mean | change | After: each seed |",
        "|---|---|---|---|---|---|",
    ]
    for condition, by_seed in after.items():
        for tier in TIERS:
            values = [by_seed[s]["greedy"][tier] for s in sorted(by_seed)]
            mean = statistics.fmean(values)
            each = ", ".join(f"{100 * v:.1f}" for v in values)
            lines.append(
                f"| {condition} | {tier} | {100 * before['greedy'][tier]:.1f} | {100 * mean:.1f} "
                f"| {100 * (mean - before['greedy'][tier]):+.1f} | {each} |"
            )
    return "\n".join(lines)


def proposal_tiers(rows: list[dict], tier_of: dict[str, str]) -> dict:
    """The valid proposals among samples.jsonl `rows`, counted by the tier of the held-out fact they ask
    (`tier_of`: canonical question -> tier; `other` when none), and the Solver's mean pass rate on each tier's."""
    rates: dict[str, list[float]] = {tier: [] for tier in (*TIERS, "other")}
    for row in rows:
        if row["invalid_reason"] is None and row["question"] is not None:
            rates[tier_of.get(canonical(row["question"]), "other")].append(row["pass_rate"])
    return {
        "valid": sum(len(r) for r in rates.values()),
        "count": {tier: len(r) for tier, r in rates.items()},
        "pass_rate": {tier: statistics.fmean(r) if r else None for tier, r in rates.items()},
    }


def proposals_table(proposals: dict[str, dict[int, dict]]) -> str:
    """Markdown: per run, the valid proposals sampled, the share asking each tier and the pass rate on them."""
    tiers = (*TIERS, "other")
    lines = [
        "| Run | valid proposals | "
        + " | ".join(f"asking {t} (%)" for t in tiers)
        + " | "
        + " | ".join(f"pass rate: {t}" for t in tiers)
        + " |",
        "|---" * (2 + 2 * len(tiers)) + "|",
    ]
    for condition, by_seed in proposals.items():
        for seed, p in sorted(by_seed.items()):
            shares = [f"{100 * p['count'][t] / max(p['valid'], 1):.1f}" for t in tiers]
            rates = ["-" if p["pass_rate"][t] is None else f"{p['pass_rate'][t]:.2f}" for t in tiers]
            lines.append(f"| {condition}-seed{seed} | {p['valid']} | " + " | ".join(shares + rates) + " |")
    return "\n".join(lines)


def run_demo_qa(cfg: QADemoConfig, *, progress: bool = True) -> Path:
    """Every phase of the module docstring; returns the run directory."""
    run_dir = Path(cfg.run_dir or f"runs/demo-qa-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    if cfg.train.num_threads is not None:
        torch.set_num_threads(cfg.train.num_threads)
    started = time.perf_counter()
    models = ensure_qa_models(Path(cfg.cache_dir) if cfg.cache_dir else None, cfg.warm_up, progress=progress)
    log.info("[demo-qa] cold start in %s (%.0fs)", models.world_dir.parent, time.perf_counter() - started)
    problems = load_heldout(models.world_dir / "heldout.jsonl")
    tier_of = {canonical(p.question): p.source for p in problems}
    before = evaluate_tiers(models.solver_dir, problems, cfg, run_dir / "eval" / "sft")
    log.info("[demo-qa] SFT Solver greedy %s", json.dumps(before["greedy"]))
    after: dict[str, dict[int, dict]] = {c: {} for c in cfg.conditions}
    proposals: dict[str, dict[int, dict]] = {c: {} for c in cfg.conditions}
    for condition in cfg.conditions:
        for seed in cfg.seeds:
            name = f"{condition}-seed{seed}"
            run_train(train_config(cfg, models, condition, seed, run_dir / name))
            solver = latest_checkpoint(run_dir / name) / "solver" / "model"
            after[condition][seed] = evaluate_tiers(solver, problems, cfg, run_dir / "eval" / name)
            samples = run_dir / name / "samples.jsonl"
            if samples.is_file():
                proposals[condition][seed] = proposal_tiers(read_jsonl(samples), tier_of)
            log.info(
                "[demo-qa] %s greedy %s (%.0fs)",
                name,
                json.dumps(after[condition][seed]["greedy"]),
                time.perf_counter() - started,
            )
    table = results_table(before, after)
    write_json_atomic(run_dir / "results.json", {"sft": before, "after": after, "proposals": proposals})
    steps = cfg.train.schedule.steps
    write_text_atomic(
        run_dir / "results.md",
        f"# Closed-book Solver accuracy per tier: SFT start vs after {steps} online dual-play steps\n\n{table}\n\n"
        "Greedy exact match (canonical rule, answer and aliases), in %; change in points of the mean.\n\n"
        f"## Valid proposals by the tier of the fact they ask (samples.jsonl)\n\n{proposals_table(proposals)}\n\n"
        "`other`: a question that is no held-out fact's; pass rate: the Solver's mean over those questions.\n",
    )
    for line in table.splitlines():
        log.info("%s", line)
    log.info("[demo-qa] done in %.0fs (%s)", time.perf_counter() - started, run_dir / "results.md")
    runs = [run_dir / f"{condition}-seed{seed}" for condition in cfg.conditions for seed in cfg.seeds]
    more = [("pasodoble train --config recipes/tiny-qa.yaml", "one QA dual-play run of your own")]
    log.info("%s", demo_next(runs, more))
    return run_dir
