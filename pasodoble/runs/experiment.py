"""`pasodoble experiment`: the tiny-world experiment, one command.

What: for each condition and seed, train from the same SFT start for the same number of steps, then evaluate the
Solver on the world's held-out tiers twice: greedily, and with the paper's protocol (pass@1 as the mean of
`eval_samples` samples at `eval_temperature`; docs/METHOD.md: mean of 6 samples at 0.6). Conditions:
    sft            no RL (the start: the same model for every seed, evaluated with each seed's sampling seed)
    online         dual-play, both roles every step (the method)
    offline        dual-play, alternating phases with a question buffer
    random_reward  online, but the Solver's reward is a coin flip (control: is the signal in the reward?)
    no_diversity   online without the diversity gate and term (ablation)
    no_knowledge   online, Proposer prompted without a passage (ablation; not in the default list)
    oracle         Solver-only GRPO on true-answer questions (the supervised upper bound)
    verified       online with the label check on (`labels.check`: a wrong label is rejected): arm A
    uniform_true   Solver-only GRPO on the corpus's facts drawn uniformly, true answers (`oracle.source=corpus`):
                   arm B, the positive control (can the assay see learning; does an adaptive Proposer beat it?)
    frozen_proposer  verified with the Proposer not trained: arm C
A recipe may name more conditions under `arms:` (name -> overrides), e.g. the label-noise curve's noise levels.
With `eval_seed` set, every run is scored on fresh evaluation sets of `eval_sizes` problems a tier drawn by that
seed from the `eval_split` side (`evals/eval_split.py`: disjoint from the corpus, the SFT data and the dev split),
and `summary.json` holds each run's change over the start with a paired bootstrap interval, the pooled changes
with hierarchical bootstrap and seed-level t intervals, the mechanism metrics and the pre-registered verdict
(`runs/experiment_summary.py`).
Reported (`OUT/results.md`, `OUT/results.json`), for each metric: accuracy per tier (mean and std over seeds), the
mean on the tiers above the SFT data, its gain over SFT, the share of the oracle's gain that each condition
recovers, and the Proposer's label accuracy, overall and on questions of three or more operands (its answers
checked with the world's own arithmetic, `world.arith.solve`: only the experiment sees true answers, never the
training). `OUT/difficulty.png` plots the Proposer's question difficulty over steps (mean Solver pass rate, share
of questions with 3+ operands).

"Same number of steps": online/oracle runs take `steps` updates; an offline iteration holds
`proposer_phase_updates + solver_phase_updates` updates, so offline runs `steps // that` iterations.

Run: `pasodoble experiment recipes/tiny-ablation.yaml [steps=10 seeds=[0]]`. Finished runs (their `eval.json`)
are reused, so a killed experiment continues where it stopped; a finished run whose evaluation settings differ
from the config's (`eval_limit`, `eval_samples`, ...) is evaluated again from its final weights, not retrained.
With `checkpoint_every` set, an unfinished run whose saved config equals its config now resumes from its newest
checkpoint (as `pasodoble train --resume`, which repeats an uninterrupted run); otherwise it starts over. An
evaluation stopped part way keeps the problems it finished when the weights and settings are the same
(`fresh_or_resumed`; `evals.runner` regenerates an unfinished chunk whole, so the answers equal an uninterrupted run's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pasodoble.config import load_config, save_config, to_dict
from pasodoble.errors import ConfigError, UserError
from pasodoble.io import read_jsonl, write_json_atomic, write_text_atomic

CONDITIONS = {
    "sft": [],
    "online": ["schedule.mode=online"],
    "offline": ["schedule.mode=offline"],
    "random_reward": ["schedule.mode=online", "rewards.solver_reward=random"],
    "no_diversity": ["schedule.mode=online", "rewards.use_diversity=false"],
    "no_knowledge": ["schedule.mode=online", "schedule.no_knowledge=true"],
    "oracle": ["schedule.mode=oracle"],
    "verified": ["schedule.mode=online", "labels.check=true"],
    "uniform_true": ["schedule.mode=oracle", "oracle.source=corpus"],
    "frozen_proposer": ["schedule.mode=online", "labels.check=true", "proposer.trainable=false"],
}


@dataclass
class ExperimentConfig:
    recipe: str = "recipes/tiny-online.yaml"  # training recipe of every condition but offline
    offline_recipe: str = (
        "recipes/tiny-offline.yaml"  # training recipe of the offline condition (phase sizes)
    )
    out_dir: str = "runs/experiment"  # results folder (runs under OUT/runs/<condition>-s<seed>)
    conditions: list[str] = field(
        default_factory=lambda: ["sft", "online", "offline", "random_reward", "no_diversity", "oracle"]
    )  # names in CONDITIONS
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # one run per seed and condition
    arm_seeds: dict[str, list[int]] = field(
        default_factory=dict
    )  # a condition's own seeds (a control at fewer)
    steps: int = 30  # updates per run (offline: converted to iterations, see module docstring)
    overrides: list[str] = field(default_factory=list)  # dotted overrides for every run's TrainConfig
    sft_tiers: list[str] = field(default_factory=lambda: ["t1", "t2"])  # tiers of the SFT data
    eval_limit: int | None = 50  # held-out problems per tier (None: the world's tier_size; t2 has 173)
    eval_max_new_tokens: int = 96  # completion budget of both evaluations
    eval_samples: int = 6  # sampled evaluation: samples per problem (the paper: 6; 0 = greedy only)
    eval_temperature: float = 0.6  # sampled evaluation: temperature (the paper: 0.6)
    arms: dict[str, list[str]] = field(default_factory=dict)  # more conditions: name -> train overrides
    eval_seed: int | None = None  # draws the evaluation sets (evals/eval_split.py); None: the world's tiers
    eval_sizes: dict[str, int | None] = field(
        default_factory=dict
    )  # with eval_seed: tier -> problems (None: all)
    eval_split: str = "test"  # with eval_seed: "test" for reported figures, "dev" for tuning
    resamples: int = 10_000  # bootstrap resamples of every interval
    primary_arm: str | None = None  # pre-registered primary arm (None: no verdict in summary.json)
    control_arm: str | None = None  # positive control: go/no-go at seed 0 and primary vs control
    primary_tier: str = "t3"  # tier of the primary endpoint (greedy change over the start)
    min_gain: float = 0.04  # success needs at least this change (and the go/no-go the control's seed 0)
    margin: float = 0.03  # non-inferiority margin on guard_tiers
    guard_tiers: list[str] = field(default_factory=lambda: ["t1", "t2"])  # tiers that must not drop
    checkpoint_every: int | None = None  # steps between a run's checkpoints, so that a stopped experiment
    # resumes its unfinished runs (None: one checkpoint at the end, and an unfinished run starts over)
    cold_start: str | None = None  # a `pasodoble demo-real` run folder: both roles start from its
    # checkpoints/sft and read its world/corpus.jsonl (a real model); None: the recipe's models (tiny:)

    def conditions_table(self) -> dict[str, list[str]]:
        return {**CONDITIONS, **self.arms}

    def seeds_of(self, condition: str) -> list[int]:
        return self.arm_seeds.get(condition, self.seeds)

    def validate(self) -> None:
        known = self.conditions_table()
        unknown = [c for c in self.conditions if c not in known]
        if unknown:
            raise ConfigError(
                "conditions", f"unknown {unknown}; use names from {', '.join(known)} or add arms"
            )
        # A known arm outside this run's conditions is allowed: a recipe's arm_seeds serve any subset of its arms.
        stray = sorted(set(self.arm_seeds) - set(known))
        if stray or not all(self.arm_seeds.values()):
            raise ConfigError(
                "arm_seeds", f"give non-empty seeds for known conditions ({stray or 'empty list'})"
            )
        clash = sorted(set(self.arms) & set(CONDITIONS))
        if clash:
            raise ConfigError("arms", f"{clash} are built-in conditions; give the arm another name")
        if self.eval_seed is not None and not self.eval_sizes:
            raise ConfigError(
                "eval_sizes", "eval_seed needs per-tier sizes, e.g. {t1: 200, t2: null, t3: 800}"
            )
        if self.eval_split not in ("dev", "test"):
            raise ConfigError("eval_split", "use test (reported figures) or dev (tuning)")
        if self.cold_start is not None:
            for part in ("checkpoints/sft/config.json", "world/corpus.jsonl"):
                if not (Path(self.cold_start) / part).is_file():
                    raise ConfigError(
                        "cold_start",
                        f"{self.cold_start} has no {part}; give a `pasodoble demo-real --out DIR` run folder",
                    )
        # Checked against the known arms, not this run's: a run of some arms (one process a core) is valid, and
        # its summary leaves out the criteria whose arms it lacks.
        for name in ("primary_arm", "control_arm"):
            value = getattr(self, name)
            if value is not None and value not in known:
                raise ConfigError(name, f"unknown arm {value!r}; use one of {', '.join(known)}")
        if not self.seeds:
            raise ConfigError("seeds", "give at least one seed, e.g. [0, 1, 2]")
        if self.steps < 1:
            raise ConfigError("steps", "must be >= 1")
        if self.eval_samples < 0:
            raise ConfigError("eval_samples", "must be >= 0 (0: greedy evaluation only)")
        if self.eval_temperature <= 0:
            raise ConfigError("eval_temperature", "must be > 0, e.g. 0.6 (greedy is evaluated anyway)")


def train_config(cfg: ExperimentConfig, condition: str, seed: int):
    """The TrainConfig of one run: recipe + experiment overrides + the condition's switches."""
    from pasodoble.runs.train import TrainConfig

    run_dir = Path(cfg.out_dir) / "runs" / f"{condition}-s{seed}"
    start = []
    if cfg.cold_start is not None:
        sft = Path(cfg.cold_start) / "checkpoints" / "sft"
        corpus = Path(cfg.cold_start) / "world" / "corpus.jsonl"
        start = [f"proposer.model={sft}", f"solver.model={sft}", f"knowledge.path={corpus}"]
    overrides = [
        *start,
        *cfg.overrides,
        *cfg.conditions_table()[condition],
        f"seed={seed}",
        f"run_dir={run_dir}",
        "schedule.samples_every=1",
        "schedule.eval_every=null",
        "logging.quiet=true",
    ]
    train = load_config(TrainConfig, cfg.offline_recipe if condition == "offline" else cfg.recipe, overrides)
    if condition == "offline":
        per_iteration = train.schedule.proposer_phase_updates + train.schedule.solver_phase_updates
        train.schedule.steps = max(1, cfg.steps // per_iteration)
    else:
        train.schedule.steps = cfg.steps
    train.schedule.checkpoint_every = cfg.checkpoint_every  # None: one at the end, the weights to evaluate
    return train


def resumable(run_dir: Path, train) -> bool:
    """Whether an unfinished run can go on: it has a checkpoint and was started with this very config (the
    launch-time layout aside), so the resumed run repeats an uninterrupted one."""
    from pasodoble.checkpoint import latest_checkpoint
    from pasodoble.runs.train import TrainConfig

    saved = run_dir / "config.yaml"
    if not saved.is_file() or latest_checkpoint(run_dir) is None:
        return False
    try:
        before = to_dict(load_config(TrainConfig, saved))
    except (UserError, OSError, ValueError):
        return False  # a damaged or older config: start over
    now = to_dict(train)
    for d in (before, now):
        d.get("distributed", {}).pop("resolved", None)
    return before == now


def evaluation_problems(train, cfg: ExperimentConfig) -> list:
    """The problems every run is scored on: fresh sets by `eval_seed`, else the world's held-out tiers."""
    if cfg.eval_seed is not None:
        from pasodoble.evals.eval_split import evaluation_problems as drawn

        return drawn(cfg.eval_sizes, cfg.eval_seed, cfg.eval_split)
    from pasodoble.evals.tiers import held_out_problems

    # Straight from the split, so the limit may pass the world's tier_size (its tiers.jsonl is the start of this).
    return held_out_problems(train.world.seed, cfg.eval_limit or train.world.tier_size)


def weights_digest(model_dir: Path) -> str:
    """sha256 over the model folder's weight files (names and bytes): which weights an answers file belongs to."""
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).glob("*.safetensors")) + sorted(Path(model_dir).glob("*.bin")):
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def fresh_or_resumed(samples: Path, identity: dict) -> None:
    """Keep `samples` for `evaluate` to resume (an evaluation stopped part way, say at the end of a session) only
    when its stamp (`<name>.identity.json`: the weights' digest and every setting) equals `identity`; otherwise
    the answers are of other weights or settings: delete them, and stamp the new ones."""
    stamp = samples.with_suffix(".identity.json")
    try:
        same = json.loads(stamp.read_text()) == json.loads(json.dumps(identity))
    except (OSError, ValueError):
        same = False
    if not same:
        samples.unlink(missing_ok=True)
        write_json_atomic(stamp, identity)


def evaluate_solver(train, model_dir: Path, cfg: ExperimentConfig, samples_dir: Path) -> dict:
    """Accuracy per held-out tier of the Solver in `model_dir` (prompted with the training template).

    Returns `{"greedy": {tier: acc}, "sampled": {tier: avg@k}, "scores": {metric: {"<tier>/<id>": score}}}`
    ("sampled" only when `cfg.eval_samples` > 0); the answers go to `samples_dir/<metric>.jsonl`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pasodoble.evals import EvalSettings, evaluate
    from pasodoble.evals.intervals import scores_by_problem
    from pasodoble.grader import Grader
    from pasodoble.rollout import HFEngine

    problems = evaluation_problems(train, cfg)
    weights = weights_digest(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, batch_size=256)
    protocols = {"greedy": (1, 0.0)}
    if cfg.eval_samples > 0:
        protocols["sampled"] = (cfg.eval_samples, cfg.eval_temperature)
    scores: dict = {"scores": {}}
    samples_dir.mkdir(parents=True, exist_ok=True)
    with Grader(train.grader) as grader:
        for name, (samples, temperature) in protocols.items():
            settings = EvalSettings(
                num_samples=samples,
                temperature=temperature,
                max_new_tokens=cfg.eval_max_new_tokens,
                seed=train.seed,
                prompt_template=train.prompts.solver_template,
                system_prompt=train.prompts.solver_system,
                max_prompt_length=train.solver.max_prompt_length,
                chunk_size=max(1, 256 // samples),
            )
            path = samples_dir / f"{name}.jsonl"
            fresh_or_resumed(
                path, {"weights": weights, "settings": asdict(settings), "eval": eval_settings(cfg)}
            )
            report = evaluate(
                engine, tokenizer, problems, settings, grader, samples_path=path, progress=False
            )
            scores[name] = {tier: result["avg@k"] for tier, result in report.per_source.items()}
            scores["scores"][name] = scores_by_problem(path)
    return scores


def mechanism(run_dir: Path) -> dict[str, float | None]:
    """Means over a run's steps of the mechanism metrics (`experiment_summary.MECHANISM`), from metrics.jsonl."""
    from pasodoble.runs.experiment_summary import MECHANISM

    path = run_dir / "metrics.jsonl"
    rows = [r for r in read_jsonl(path) if "phase" in r] if path.exists() else []
    out = {}
    for name, key in MECHANISM.items():
        values = [r[key] for r in rows if key in r]
        out[name] = statistics.mean(values) if values else None
    return out


def operand_count(question: str) -> int:
    return len(re.findall(r"\d+", question))


def proposer_stats(run_dir: Path) -> dict:
    """Label accuracy of valid proposals (against world.arith) and per-step difficulty, from samples.jsonl."""
    from pasodoble.world import arith

    path = run_dir / "samples.jsonl"
    if not path.exists():
        return {}
    checked = right = checked_hard = right_hard = 0
    per_step: dict[int, list[int]] = {}
    for row in read_jsonl(path):
        if row.get("invalid_reason") is not None or row.get("proposer_completion") is None:
            continue
        truth = arith.solve(row["question"])
        ok = truth is not None and row["answer"].strip() == str(truth)
        operands = operand_count(row["question"])
        checked, right = checked + 1, right + ok
        if operands >= 3:
            checked_hard, right_hard = checked_hard + 1, right_hard + ok
        per_step.setdefault(row["step"], []).append(operands)
    hard = {s: sum(n >= 3 for n in counts) / len(counts) for s, counts in sorted(per_step.items())}
    return {
        "label_accuracy": right / checked if checked else None,
        "labels_checked": checked,
        "label_accuracy_3plus": right_hard / checked_hard if checked_hard else None,
        "labels_checked_3plus": checked_hard,
        "share_3plus_operands": hard,
    }


def eval_settings(cfg: ExperimentConfig) -> dict:
    """What a run's scores depend on besides its weights; stored in eval.json to tell when they must be redone."""
    drawn = {"eval_seed": cfg.eval_seed, "sizes": cfg.eval_sizes, "split": cfg.eval_split}
    return {
        **(drawn if cfg.eval_seed is not None else {}),  # absent for the world's tiers, as before these keys
        "limit": cfg.eval_limit,
        "samples": cfg.eval_samples,
        "temperature": cfg.eval_temperature,
        "max_new_tokens": cfg.eval_max_new_tokens,
    }


def _scores(train, model_dir: Path, cfg: ExperimentConfig) -> dict:
    """The evaluation part of a run's eval.json."""
    start = time.perf_counter()
    scores = evaluate_solver(train, model_dir, cfg, Path(train.run_dir) / "eval")
    return {
        "accuracy": scores["greedy"],
        "sampled": scores.get("sampled"),
        "scores": scores["scores"],
        "eval_s": time.perf_counter() - start,
        "eval": eval_settings(cfg),
    }


def run_one(cfg: ExperimentConfig, condition: str, seed: int) -> dict:
    """Train (unless sft) and evaluate one run.

    A finished run (its eval.json) is reused; if it was evaluated with other settings (say a larger `eval_limit`),
    its final weights are evaluated again, without training again.
    """
    from pasodoble.checkpoint import latest_checkpoint
    from pasodoble.runs.train import resolve, run_train

    train = train_config(cfg, condition, seed)
    run_dir = Path(train.run_dir)
    done = run_dir / "eval.json"

    def solver_dir() -> Path:
        if condition == "sft":
            return Path(resolve(train.solver.model, train))
        return latest_checkpoint(run_dir) / "solver" / "model"

    if condition == "sft" and cfg.eval_samples == 0 and seed != cfg.seeds[0]:
        # greedy only: every seed's start is the same model scored the same way; score it once
        first = run_one(cfg, condition, cfg.seeds[0])
        return {**first, "seed": seed}
    result = json.loads(done.read_text()) if done.exists() else None
    # Runs scored before per-problem scores were kept count as stale: the intervals need them.
    stale = result is not None and (result.get("eval") != eval_settings(cfg) or "scores" not in result)
    if stale and condition != "sft" and latest_checkpoint(run_dir) is None:
        result = None  # nothing left to evaluate again: train again
    if result is not None:
        if stale:
            result.update(_scores(train, solver_dir(), cfg))
        missing_stats = condition != "sft" and "mechanism" not in result  # from before these columns
        if missing_stats:
            result.update(proposer_stats(run_dir), mechanism=mechanism(run_dir))
        if stale or missing_stats:
            write_json_atomic(done, result)  # once: later loads read it back
        return result
    start, resume = time.perf_counter(), False
    if condition == "sft":
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        resume = resumable(run_dir, train)
        if run_dir.exists() and not resume:
            import shutil

            shutil.rmtree(run_dir)  # an unfinished run starts over: its eval.json is the completion mark
        if resume:
            print(
                f"[experiment] {condition} seed {seed}: resuming from {latest_checkpoint(run_dir)}",
                flush=True,
            )
        run_train(train, resume=resume)
    result = {
        "condition": condition,
        "seed": seed,
        "train_s": time.perf_counter() - start,
        "steps": 0 if condition == "sft" else train.schedule.steps,
        "resumed": condition != "sft" and resume,  # train_s then counts only the part after the resume
        **_scores(train, solver_dir(), cfg),
        **proposer_stats(run_dir),
        "mechanism": mechanism(run_dir),
    }
    write_json_atomic(done, result)
    return result


METRICS = {
    "accuracy": "Greedy accuracy",
    "sampled": "Sampled accuracy (the paper's protocol: pass@1 as the mean of k samples)",
}


def summarise(cfg: ExperimentConfig, results: list[dict], metric: str = "accuracy") -> dict:
    """Mean/std per condition and tier of one metric, the above-SFT mean, gains, oracle share, label accuracy."""
    tiers = sorted({t for r in results for t in r[metric]})
    above = [t for t in tiers if t not in cfg.sft_tiers]
    summary = {}
    for condition in cfg.conditions:
        runs = [r for r in results if r["condition"] == condition]
        row = {}
        for tier in [*tiers, "above"]:
            values = [
                statistics.mean(r[metric][t] for t in above) if tier == "above" else r[metric][tier]
                for r in runs
            ]
            row[tier] = {
                "mean": statistics.mean(values),
                "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
            }
        for key in ("label_accuracy", "label_accuracy_3plus"):
            labels = [r[key] for r in runs if r.get(key) is not None]
            row[key] = statistics.mean(labels) if labels else None
        row["train_s"] = statistics.mean(r["train_s"] for r in runs)
        summary[condition] = row
    base = summary.get("sft", {}).get("above", {}).get("mean")
    oracle = summary.get("oracle", {}).get("above", {}).get("mean")
    for row in summary.values():
        row["gain_above"] = None if base is None else row["above"]["mean"] - base
        gap = None if base is None or oracle is None else oracle - base
        row["oracle_share"] = row["gain_above"] / gap if gap and row["gain_above"] is not None else None
    return {"metric": metric, "tiers": tiers, "above_tiers": above, "conditions": summary}


def summarise_all(cfg: ExperimentConfig, results: list[dict]) -> dict[str, dict]:
    """`summarise` for every metric all runs have (greedy always; sampled when it was evaluated)."""
    return {
        metric: summarise(cfg, results, metric)
        for metric in METRICS
        if all(r.get(metric) is not None for r in results)
    }


def _fmt(cell: dict) -> str:
    return f"{100 * cell['mean']:.1f} ± {100 * cell['std']:.1f}"


def metric_table(summary: dict) -> str:
    """One markdown table: a row per condition, a column per tier plus the above-SFT summary columns."""
    tiers, above = summary["tiers"], summary["above_tiers"]
    head = [
        "Condition",
        *tiers,
        f"above SFT ({'+'.join(above)})",
        "gain vs SFT",
        "oracle share",
        "label acc",
        "label acc 3+ ops",
        "train s/run",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for condition, row in summary["conditions"].items():
        share = "" if row["oracle_share"] is None else f"{100 * row['oracle_share']:.0f}%"
        gain = "" if row["gain_above"] is None else f"{100 * row['gain_above']:+.1f}"
        label, hard = (
            "" if row[key] is None else f"{100 * row[key]:.1f}"
            for key in ("label_accuracy", "label_accuracy_3plus")
        )
        cells = [
            condition,
            *[_fmt(row[t]) for t in tiers],
            _fmt(row["above"]),
            gain,
            share,
            label,
            hard,
            f"{row['train_s']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    online = summary["conditions"].get("online", {}).get("gain_above")
    control = summary["conditions"].get("random_reward", {}).get("gain_above")
    verdict = ""
    if online is not None and control is not None:
        verdict = (
            f"\nAcceptance (online >= +5 points above SFT on {'+'.join(above)}, random reward not): online "
            f"{100 * online:+.1f}, random_reward {100 * control:+.1f} -> "
            f"{'met' if online >= 0.05 and control < 0.05 else 'NOT met'}.\n"
        )
    return "\n".join(lines) + "\n" + verdict


def results_markdown(cfg: ExperimentConfig, summaries: dict[str, dict], elapsed_s: float) -> str:
    per_tier = f"up to {cfg.eval_limit}" if cfg.eval_limit else "all"
    parts = [
        f"# Tiny-world experiment\n\nSolver accuracy (%) on held-out tiers ({per_tier} problems per "
        f"tier), mean ± std over seeds {cfg.seeds}; {cfg.steps} updates per run; recipe `{cfg.recipe}`; "
        f"overrides {cfg.overrides}.\n"
    ]
    for metric, summary in summaries.items():
        title = METRICS[metric]
        if metric == "sampled":
            title += f", k = {cfg.eval_samples}, temperature {cfg.eval_temperature}"
        parts.append(f"\n## {title}\n\n{metric_table(summary)}")
    parts.append(f"\nTotal wall time {elapsed_s / 60:.1f} min. Difficulty over steps: difficulty.png.\n")
    return "".join(parts)


def plot_difficulty(cfg: ExperimentConfig, out: Path) -> None:
    """Mean Solver pass rate of valid proposals and the share of 3+-operand questions, per step (seed mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for condition in cfg.conditions:
        if condition in ("sft", "oracle"):
            continue
        rates: dict[int, list[float]] = {}
        shares: dict[int, list[float]] = {}
        for seed in cfg.seeds_of(condition):
            run_dir = Path(cfg.out_dir) / "runs" / f"{condition}-s{seed}"
            if not (run_dir / "metrics.jsonl").exists():
                continue
            for row in read_jsonl(run_dir / "metrics.jsonl"):
                if "proposer/pass_rate/mean" in row:
                    rates.setdefault(row["step"], []).append(row["proposer/pass_rate/mean"])
            for step, share in proposer_stats(run_dir).get("share_3plus_operands", {}).items():
                shares.setdefault(int(step), []).append(share)
        for ax, series in ((axes[0], rates), (axes[1], shares)):
            steps = sorted(series)
            ax.plot(steps, [statistics.mean(series[s]) for s in steps], label=condition)
    axes[0].set_title("Solver pass rate on proposed questions")
    axes[1].set_title("share of proposed questions with 3+ operands")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write_summary(cfg: ExperimentConfig, results: list[dict], path: Path) -> dict:
    """summary.json: the config, per-run and pooled changes with intervals, mechanism, verdict (no per-problem
    scores: small enough to commit under docs/results/)."""
    config = to_dict(cfg)
    for key in (
        "out_dir",
        "cold_start",
    ):  # folder names only: the file is committed, a machine's paths are not
        config[key] = Path(config[key]).name if config[key] else None
    # without an sft run there are no changes to pair: the summary then holds the arms and no intervals;
    # imported here, after the config is read (it loads numpy and the evaluation package)
    from pasodoble.runs import experiment_summary

    intervals = {"config": config, **experiment_summary.summary(cfg, results)}
    write_json_atomic(path, intervals)
    return intervals


def run_experiment(cfg: ExperimentConfig) -> Path:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    print(f"[experiment] results in {out} (runs under {out / 'runs'}; finished runs are reused)", flush=True)
    started, results = time.perf_counter(), []
    for condition in cfg.conditions:
        for seed in cfg.seeds_of(condition):
            t0 = time.perf_counter()
            result = run_one(cfg, condition, seed)
            results.append(result)
            acc = " ".join(f"{t}={100 * v:.0f}" for t, v in sorted(result["accuracy"].items()))
            if result.get("sampled"):
                acc += " | sampled " + " ".join(
                    f"{t}={100 * v:.0f}" for t, v in sorted(result["sampled"].items())
                )
            print(
                f"[experiment] {condition} seed {seed}: {acc} ({time.perf_counter() - t0:.0f}s)", flush=True
            )
    from pasodoble.runs.experiment_summary import summary_markdown

    summaries = summarise_all(cfg, results)
    write_json_atomic(
        out / "results.json",
        {"config": to_dict(cfg), "summary": summaries["accuracy"], "summaries": summaries, "runs": results},
    )
    intervals = write_summary(cfg, results, out / "summary.json")
    plot_difficulty(cfg, out / "difficulty.png")
    write_text_atomic(
        out / "results.md",
        results_markdown(cfg, summaries, time.perf_counter() - started)
        + "\n## Changes with intervals\n\n"
        + summary_markdown(intervals),
    )
    print((out / "results.md").read_text(), flush=True)
    print(
        f"[experiment] wrote {out / 'results.md'}, results.json and difficulty.png; each run's folder is "
        f"{out / 'runs'}/<condition>-s<seed> (plot one: pasodoble plot {out / 'runs'}/online-s0)",
        flush=True,
    )
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "experiment", help="tiny-world experiment: SFT vs dual-play vs controls vs oracle"
    )
    p.add_argument("config", type=Path, help="experiment YAML, e.g. recipes/tiny-ablation.yaml")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides, e.g. steps=10 seeds=[0] 'overrides+=[proposer.temperature=1.0]' (+= appends)",
    )
    p.set_defaults(func=run_experiment_cmd)


def run_experiment_cmd(args: argparse.Namespace) -> int:
    run_experiment(load_config(ExperimentConfig, args.config, args.overrides))
    return 0
