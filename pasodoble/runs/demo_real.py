"""`pasodoble demo-real`: the whole pipeline on a real pretrained model (SmolLM2-135M-Instruct) on a CPU.

The tiny world's arithmetic task (corpus of number passages, four held-out tiers, the programmatic teacher) with a
real model, its real tokenizer and its chat template. Phases, one log line each with its seconds and an ETA for
the whole run:
fetch (the `pkg:` model into the cache, once) -> data (the world's files; its tiny tokenizer and model are unused)
-> sft (full fine-tune of one model on both roles' teacher data, rendered with the model's chat template; both
roles start from it) -> eval sft (greedy and sampled, per tier) -> dual-play (online, `recipes/smollm2-135m-online
.yaml`) -> eval after -> the per-tier table with the change, as `pasodoble demo` prints it.

Run: `pasodoble demo-real [--quick] [--config FILE] [--out DIR] [key=value ...]` (`make demo-real`; the command line
in `demo_cli.py` and `RealDemoConfig` in `demo_config.py`, read and checked before torch loads). `--quick`
reads `recipes/smollm2-135m-demo-quick.yaml`: a few steps on small sets, minutes, for a smoke test. The run
directory has the layout of `pasodoble demo` (config.yaml, metrics.jsonl, checkpoints/sft, dualplay/, eval/) and
`phases.json` (seconds per phase). Measured figures: docs/REAL_MODELS.md ("The whole pipeline").

Seeds and a control: `seeds=[0,1,2] conditions=[dualplay,random_reward]` runs dual-play once per (condition, seed)
from the same SFT start (folders `<condition>-seed<S>/` and `eval/<condition>-seed<S>/`) and writes a table of the
mean over seeds and each seed. `sft_from=DIR` starts from a finished cold start (an earlier run's
`checkpoints/sft`, made with the same world and sft settings) instead of training one.

Departure from `pasodoble demo`: no stop rule during SFT (evaluating a 135M model every few steps costs more than
the SFT itself); a fixed number of steps instead. ETA: seconds per token of the phases done so far times the
tokens the remaining phases will process (planned from the data and the configs; rough, within a factor ~1.5).
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.config import load_config, save_config
from pasodoble.evals.intervals import hierarchical_bootstrap, paired_scores, points, seed_t_interval
from pasodoble.evals.tiers import load_tier_problems
from pasodoble.io import read_jsonl, write_json_atomic, write_text_atomic
from pasodoble.realmodels import is_pkg_spec, resolve_pkg
from pasodoble.reports.tracking import Tracker
from pasodoble.runs.demo import (
    change_table,
    changes,
    evaluate_solver,
    run_dualplay,
    tiers_above_sft,
)
from pasodoble.runs.demo_config import CONDITIONS, find_recipe
from pasodoble.runs.demo_config import RealDemoConfig as RealDemoConfig  # re-exported: read without torch
from pasodoble.runs.run_notes import demo_next
from pasodoble.sft import train_sft
from pasodoble.world import build_world

log = logging.getLogger("pasodoble.runs.demo_real")
PHASES = (
    "fetch",
    "data",
    "sft",
    "eval sft",
    "dual-play",
    "eval after",
)  # one dual-play run; more repeat the last two


def phase_keys(config: RealDemoConfig) -> list[tuple[str, str]]:
    """(dual-play phase, evaluation phase) names of each run: PHASES' last two for one run, else named by run."""
    runs = config.runs()
    if len(runs) == 1:
        return [("dual-play", "eval after")]
    return [(f"dual-play {name}", f"eval {name}") for name, _, _ in runs]


def planned_tokens(config: RealDemoConfig, mean_sft_tokens: float, dual_recipe) -> dict[str, float]:
    """Tokens each phase processes (trained or generated), for the ETA; completions assumed 60% of their cap."""
    ev, tiers = config.eval, 4
    per_eval = tiers * (ev.problems_per_tier or config.world.tier_size) * (1 + ev.num_samples)
    p, s = dual_recipe.proposer, dual_recipe.solver
    groups = dual_recipe.schedule.passages_per_step * p.num_generations
    per_step = groups * p.max_completion_length + groups * s.num_generations * s.max_completion_length
    return {
        "sft": config.sft.max_steps * config.sft.batch_size * mean_sft_tokens,
        "eval sft": 0.6 * per_eval * ev.max_new_tokens,
        "dual-play": 2 * 0.6 * config.dualplay.steps * per_step,  # generated, then trained on
        "eval after": 0.6 * per_eval * ev.max_new_tokens if config.dualplay.steps else 0.0,
    }


class Clock:
    """Seconds per phase and a whole-run ETA from the seconds per planned token measured so far."""

    def __init__(self, phases: tuple[str, ...] | list[str] = PHASES):
        self.phases = list(phases)
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}  # this process's CPU time: the wall time on a quiet core
        self.plan: dict[str, float] = {}

    def eta_s(self) -> float | None:
        done = [p for p in self.plan if p in self.seconds]
        tokens = sum(self.plan[p] for p in done)
        if not tokens:
            return None
        rate = sum(self.seconds[p] for p in done) / tokens
        return rate * sum(t for p, t in self.plan.items() if p not in self.seconds)

    def phase(self, name: str):
        clock = self

        class _Timed:
            def __enter__(self):
                eta = clock.eta_s()
                left = f", ETA {eta / 60:.0f} min" if eta is not None else ""
                elapsed = (time.perf_counter() - clock.start) / 60
                log.info(
                    "[demo-real] %d/%d %s (elapsed %.1f min%s)",
                    clock.phases.index(name) + 1,
                    len(clock.phases),
                    name,
                    elapsed,
                    left,
                )
                self.t0, self.cpu0, self.note = time.perf_counter(), time.process_time(), ""
                return self

            def __exit__(self, *exc):
                if exc[0] is None:
                    clock.seconds[name] = time.perf_counter() - self.t0
                    clock.cpu_seconds[name] = time.process_time() - self.cpu0
                    log.info(
                        "[demo-real] %-10s %7.1fs (%.1f CPU-s)  %s",
                        name,
                        clock.seconds[name],
                        clock.cpu_seconds[name],
                        self.note,
                    )

        return _Timed()


def _mean_tokens(tokenizer, examples: list[dict], limit: int = 200) -> float:
    """Mean prompt (chat-templated) + completion length of the first `limit` examples."""
    sizes = []
    for e in examples[:limit]:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": e["prompt"]}], add_generation_prompt=True, tokenize=False
        )
        sizes.append(len(tokenizer(prompt + e["completion"], add_special_tokens=False)["input_ids"]) + 1)
    return sum(sizes) / max(len(sizes), 1)


def _dual_recipe(config: RealDemoConfig, corpus: Path):
    """The dual-play TrainConfig as `run_dualplay` will load it (for the ETA plan)."""
    from pasodoble.runs.train import TrainConfig

    return load_config(
        TrainConfig, config.dualplay.recipe, [*config.dualplay.overrides, f"knowledge.path={corpus}"]
    )


def cold_start(
    config: RealDemoConfig, base: str, examples: list[dict], out: Path, tracker: Tracker, progress: bool
) -> dict:
    """Full fine-tune of `base` on both roles' teacher data; saves model and tokenizer into `out`."""
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    summary = train_sft(
        model, tokenizer, examples, config.sft, tracker=tracker, role="both", progress=progress
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return summary


def run_demo_real(config: RealDemoConfig, *, progress: bool = True) -> Path:
    """Run every phase (module docstring); returns the run directory."""
    config.validate()
    run_dir = Path(config.run_dir or f"runs/demo-real-{time.strftime('%Y%m%d-%H%M%S')}")
    keys = phase_keys(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.sft.num_threads is not None:
        torch.set_num_threads(config.sft.num_threads)
    config.dualplay.recipe = str(find_recipe(config.dualplay.recipe))
    save_config(config, run_dir / "config.yaml")
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    log.info("[demo-real] run directory %s", run_dir)
    clock = Clock([*PHASES[:4], *(k for pair in keys for k in pair)])
    cache = Path(config.cache_dir) if config.cache_dir else None
    with Tracker(run_dir) as tracker:
        with clock.phase("fetch") as ph:
            base = (
                resolve_pkg(config.model, cache, progress=progress)
                if is_pkg_spec(config.model)
                else config.model
            )
            ph.note = base
        with clock.phase("data") as ph:
            paths = build_world(run_dir / "world", config.world)
            examples = read_jsonl(paths.sft_proposer) + read_jsonl(paths.sft_solver)
            problems = load_tier_problems(paths.tiers, config.eval.problems_per_tier)
            mean = _mean_tokens(AutoTokenizer.from_pretrained(base), examples)
            per_run = planned_tokens(config, mean, _dual_recipe(config, paths.corpus))
            clock.plan = {"sft": 0.0 if config.sft_from else per_run["sft"], "eval sft": per_run["eval sft"]}
            for dual, ev in keys:
                clock.plan[dual], clock.plan[ev] = per_run["dual-play"], per_run["eval after"]
            ph.note = f"{len(examples)} SFT examples ({mean:.0f} tokens on average), {len(problems)} problems"
        sft_dir, sft = run_dir / "checkpoints" / "sft", None
        with clock.phase("sft") as ph:
            if config.sft_from is not None:
                sft_dir = Path(config.sft_from)
                ph.note = f"not trained: starting from {sft_dir}"
            else:
                sft = cold_start(config, base, examples, sft_dir, tracker, progress)
                ph.note = f"loss {sft['both/sft/loss_first']:.3f} -> {sft['both/sft/loss_last']:.3f}"
        eval_dir = run_dir / "eval"
        with clock.phase("eval sft") as ph:
            before = evaluate_solver(sft_dir, problems, config.eval, eval_dir / "sft", progress=progress)
            ph.note = _note(before)
        afters: dict[str, dict] = {}
        runs = config.runs() if config.dualplay.steps > 0 else []
        for (name, condition, seed), (dual_key, eval_key) in zip(runs, keys):
            with clock.phase(dual_key) as ph:
                run_config = copy.deepcopy(config)
                run_config.dualplay.overrides = [
                    *config.dualplay.overrides,
                    *(f"{r}.model={sft_dir}" for r in ("proposer", "solver")),
                    f"knowledge.path={paths.corpus}",
                    f"seed={seed}",
                    f"knowledge.seed={seed}",
                    f"rewards.solver_reward={CONDITIONS[condition]}",
                ]
                solver_dir = run_dualplay(
                    run_config, run_dir, cache, quiet=False, name=name
                )  # step lines: ETA
                ph.note = f"{config.dualplay.steps} online steps in {run_dir / name}"
            with clock.phase(eval_key) as ph:
                afters[name] = evaluate_solver(
                    solver_dir, problems, config.eval, eval_dir / name, progress=progress
                )
                ph.note = _note(afters[name])
    total = time.perf_counter() - clock.start
    cpu = time.process_time() - clock.cpu_start
    write_json_atomic(
        run_dir / "phases.json",
        {
            "seconds": clock.seconds,
            "cpu_seconds": clock.cpu_seconds,
            "total_s": total,
            "total_cpu_s": cpu,
            "sft": sft,
        },
    )
    if len(afters) > 1:
        _report_seeds(config, before, afters, eval_dir)
    else:
        _report(config, before, next(iter(afters.values()), None), eval_dir)
    log.info("[demo-real] done in %.1f min (%.1f CPU-min)", total / 60, cpu / 60)
    more = [(f"cat {eval_dir / 'results.md'}", "the per-tier table above, in Markdown")]
    if config.dualplay.steps > 0:
        more.append(
            ("pasodoble train --config recipes/smollm2-135m-online.yaml", "longer dual-play on SmolLM2")
        )
    log.info("%s", demo_next([run_dir / name for name, _, _ in runs], more))
    return run_dir


def _note(summary: dict) -> str:
    return "  ".join(f"{t} greedy {r['greedy_acc']:.2f}" for t, r in summary["per_tier"].items())


def _report(config: RealDemoConfig, before: dict, after: dict | None, eval_dir: Path) -> None:
    """Writes eval/results.{json,md} and logs the table, as `pasodoble demo` does."""
    above = tiers_above_sft(config.world)
    summary = {"sft": before, "dualplay": after, "tiers_above_sft": above}
    after = after or before  # no dual-play: the table compares the SFT start with itself
    summary["change"] = changes(before, after)
    table = change_table(before, after, above)
    k, temp = config.eval.num_samples, config.eval.temperature
    title = (
        f"Solver per tier: SFT start vs after {config.dualplay.steps} online dual-play steps ({config.model})"
    )
    write_json_atomic(eval_dir / "results.json", summary)
    write_text_atomic(
        eval_dir / "results.md",
        f"# {title}\n\n{table}\n\nGreedy accuracy and sampled avg@{k} at temperature {temp} (%), change in "
        f"points; in band: share of problems whose sampled pass rate is in (0.2, 1).\n",
    )
    log.info("[demo-real] %s (%s)", title, eval_dir / "results.md")
    for line in table.splitlines():
        log.info("%s", line)


def seeds_table(
    before: dict, afters: dict[str, dict], runs: list[tuple[str, str, int]], above: list[str]
) -> str:
    """Markdown: per condition and tier, greedy and sampled accuracy of the SFT start, the mean over seeds after
    dual-play, its change in points, and each seed's value (in seed order)."""
    lines = [
        "| Condition | Tier | Greedy SFT | Greedy after: mean | change | each seed "
        "| Sampled SFT | Sampled after: mean | change | each seed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for condition in dict.fromkeys(c for _, c, _ in runs):
        names = [name for name, c, _ in runs if c == condition]
        for tier, b in before["per_tier"].items():
            cells = []
            for key in ("greedy_acc", "sampled_avg"):
                values = [100 * afters[name]["per_tier"][tier][key] for name in names]
                mean = statistics.fmean(values)
                cells += [
                    f"{100 * b[key]:.1f}",
                    f"{mean:.1f}",
                    f"{mean - 100 * b[key]:+.1f}",
                    ", ".join(f"{v:.1f}" for v in values),
                ]
            mark = " (above SFT)" if tier in above else ""
            lines.append(f"| {condition} | {tier}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pooled_table(before: dict, afters: dict[str, dict], runs: list[tuple[str, str, int]]) -> str:
    """Markdown: per condition and tier, the mean change over seeds (points) with its hierarchical bootstrap 95%
    interval (seeds, then problems) and its seed-level t interval, greedy and sampled."""
    lines = [
        "| Condition | Tier | Greedy change [hierarchical] | t interval | Sampled change [hierarchical] | t interval |",
        "|---|---|---|---|---|---|",
    ]
    for condition in dict.fromkeys(c for _, c, _ in runs):
        names = [name for name, c, _ in runs if c == condition]
        for tier in before["per_tier"]:
            cells = []
            for metric in ("greedy", "sampled"):
                pairs = [
                    paired_scores(before["scores"][metric], afters[n]["scores"][metric], f"{tier}/")
                    for n in names
                ]
                deltas = [statistics.fmean(a) - statistics.fmean(b) for b, a in pairs]
                cells += [points(hierarchical_bootstrap(pairs)), points(seed_t_interval(deltas))]
            lines.append(f"| {condition} | {tier} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _report_seeds(config: RealDemoConfig, before: dict, afters: dict[str, dict], eval_dir: Path) -> None:
    """Writes eval/results.{json,md} for several dual-play runs (seeds and conditions) and logs the table."""
    above, runs = tiers_above_sft(config.world), config.runs()
    table = seeds_table(before, afters, runs, above) + "\n\n" + pooled_table(before, afters, runs)
    summary = {
        "sft": before,
        "runs": {name: {"condition": c, "seed": s, "eval": afters[name]} for name, c, s in runs},
        "change": {name: changes(before, afters[name]) for name, _, _ in runs},
        "tiers_above_sft": above,
    }
    k, temp = config.eval.num_samples, config.eval.temperature
    title = (
        f"Solver per tier: SFT start vs after {config.dualplay.steps} online dual-play steps, seeds "
        f"{', '.join(map(str, config.seeds))} ({config.model})"
    )
    write_json_atomic(eval_dir / "results.json", summary)
    write_text_atomic(
        eval_dir / "results.md",
        f"# {title}\n\n{table}\n\nGreedy accuracy and sampled avg@{k} at temperature {temp} (%); change: the mean "
        "over seeds minus the SFT start, in points; random_reward: the control, whose Solver reward is a coin flip.\n",
    )
    log.info("[demo-real] %s (%s)", title, eval_dir / "results.md")
    for line in table.splitlines():
        log.info("%s", line)
