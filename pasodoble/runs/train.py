"""`pasodoble train`: build both roles from a recipe, run the dual-play loop, checkpoint, resume.

What: `run_train` takes a `TrainConfig` (`train_config.py`, re-exported here: one dataclass per concern, read and
checked without torch; the command line, `train_cli.py`, checks it before it imports this module): it resolves
the models (`tiny:proposer` / `tiny:solver` build and cache the tiny world on first use), wires
sampler, grader, evaluator and tracker into `DualPlay`, and writes the run directory:

    RUN_DIR/config.yaml        the resolved config (`--resume` reads it back)
    RUN_DIR/metrics.jsonl      one row per inner step (+ eval rows); `pasodoble plot RUN_DIR` renders it
    RUN_DIR/samples.jsonl      rollout samples every `schedule.samples_every` steps
    RUN_DIR/checkpoints/       step-N/{proposer,solver}/model (Hugging Face format) + optimizer/scheduler states,
                               state.json (loop state, sampler), rng.pt; `latest`

Resume: `pasodoble train --resume RUN_DIR [overrides]` loads RUN_DIR/config.yaml, restores the newest checkpoint
that passes its manifest check (a damaged newer one is named in a warning line; `--strict-resume` stops there
instead), cuts metrics.jsonl / samples.jsonl back to its step and continues; on CPU the result equals an
uninterrupted run with the same seed (tests/runs/test_resume.py). config.yaml is rewritten only once the checkpoint has
loaded; overrides that change weight shapes are refused first (`resume_changes`).

Run: `pasodoble train --config recipes/tiny-online.yaml schedule.steps=20 solver.lr=1e-5`.

Departures: the oracle mode (Solver-only GRPO on the tiny world's true answers) is an experiment control, not
part of the method; its questions come from `oracle.tiers` of the tiny world.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from pathlib import Path

import torch

from pasodoble import accel, allocator, checkpoint
from pasodoble.config import save_config
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.domains import get_domain
from pasodoble.dualplay import DualPlay, derive_seed
from pasodoble.errors import ConfigError, UserError
from pasodoble.evals.periodic import SolverEvaluator, load_eval_problems
from pasodoble.folders import check_folder, claim_folder, folder_owner, mark_folder
from pasodoble.realmodels import is_pkg_spec, resolve_pkg
from pasodoble.reports.tracking import Tracker
from pasodoble.roles.models import check_model_spec
from pasodoble.roles.role import Role
from pasodoble.roles.shared_base import build_shared_roles
from pasodoble.rollout.placement import Placement
from pasodoble.runs.run_notes import stop_on_interrupt, train_finished
from pasodoble.runs.train_config import TINY, TINY_TIERS, TrainConfig  # re-exported: light
from pasodoble.runs.train_config import LoggingConfig as LoggingConfig
from pasodoble.runs.train_config import OracleConfig as OracleConfig
from pasodoble.scale.collectives import from_env
from pasodoble.scale.layout import (
    Launch,
    check_layout,
    describe,
    generating_roles,
    has_proposer,
    launch_from_env,
    model_architectures,
)
from pasodoble.scale.sharding import build_sharding, check_roles
from pasodoble.sft.tiny import ensure_sft_models
from pasodoble.threads import busy_warning, resolve_num_threads


def total_updates(cfg: TrainConfig) -> tuple[int, int]:
    """Optimizer steps each role will take at most (sizes the learning-rate schedule)."""
    s, mu_p, mu_s = cfg.schedule, cfg.proposer.num_iterations, cfg.solver.num_iterations
    if s.mode == "offline":
        return s.steps * s.proposer_phase_updates * mu_p, s.steps * s.solver_phase_updates * mu_s
    return s.steps * mu_p, s.steps * mu_s


def _tiny_models(cfg: TrainConfig):
    """The SFT-warmed tiny models of (cfg.world, cfg.sft), built and cached on first use."""
    cache = Path(cfg.cache_dir) if cfg.cache_dir else None
    return ensure_sft_models(cache, cfg.world, cfg.sft, progress=not cfg.logging.quiet)


def resolve(spec: str, cfg: TrainConfig) -> str:
    """`tiny:proposer` / `tiny:solver` / `tiny:base` -> a local folder; `pkg:` specs -> their cached folder (fetched
    on first use); any other spec unchanged."""
    if is_pkg_spec(spec):
        return resolve_pkg(
            spec, Path(cfg.cache_dir) if cfg.cache_dir else None, progress=not cfg.logging.quiet
        )
    if not spec.startswith(TINY):
        return spec
    models = _tiny_models(cfg)
    role = spec[len(TINY) :]
    folders = {
        "proposer": models.proposer_dir,
        "solver": models.solver_dir,
        "base": models.world.base_model_dir,
    }
    if role not in folders:
        raise ConfigError(
            "model", f"unknown tiny model {spec!r}; use tiny:proposer, tiny:solver or tiny:base"
        )
    return str(folders[role])


def build_roles(
    cfg: TrainConfig, world_size: int = 1, placement: Placement | None = None
) -> tuple[Role | None, Role]:
    """Both roles, wrapped for `world_size` ranks by the configured engine (one sharding object for both);
    `placement` (`rollout.placement.Placement`) says where their vLLM servers run (None: one process)."""
    p_updates, s_updates = total_updates(cfg)
    d = cfg.distributed
    check_roles(d.backend, world_size, generating_roles(cfg))
    sharding = build_sharding(
        d.backend, world_size, zero_stage=d.zero_stage, offload_optimizer=d.offload_optimizer
    )
    if cfg.roles.shared_base:
        base, other = resolve(cfg.proposer.model, cfg), resolve(cfg.solver.model, cfg)
        if Path(base).resolve() != Path(other).resolve():
            raise ConfigError(
                "roles.shared_base", "needs one base model; proposer.model and solver.model differ"
            )
        return build_shared_roles(
            cfg.proposer,
            cfg.solver,
            base,
            updates=(p_updates, s_updates),
            sharding=sharding,
            placement=placement,
        )
    updates = {"proposer": p_updates, "solver": s_updates}

    def build(name: str) -> Role:
        role_cfg = getattr(cfg, name)
        return Role.from_pretrained(
            name,
            role_cfg,
            resolve(role_cfg.model, cfg),
            total_updates=updates[name],
            sharding=sharding,
            placement=placement,
        )

    proposer = build("proposer") if has_proposer(cfg) else None
    return proposer, build("solver")


def build_sampler(cfg: TrainConfig, proposer: Role | None) -> PassageSampler | None:
    if not has_proposer(cfg) or cfg.schedule.no_knowledge:
        return None
    knowledge = cfg.knowledge
    if knowledge.path is None:
        knowledge = KnowledgeConfig(**{**knowledge.__dict__, "path": str(_tiny_models(cfg).world.corpus)})
    return get_domain(cfg.domain).open_corpus(knowledge, tokenizer=proposer.tokenizer)


def build_evaluator(cfg: TrainConfig, grader) -> SolverEvaluator | None:
    """The in-training Solver evaluation; it prompts with the Solver's training template (prompts.solver_*)."""
    if cfg.eval is None:
        return None
    ev = cfg.eval
    if ev.problems_file == TINY_TIERS:
        from pasodoble.evals.tiers import load_tier_problems

        problems = load_tier_problems(_tiny_models(cfg).world.tiers, ev.limit)
    else:
        ev.validate()
        problems = load_eval_problems(ev)
    settings = ev.settings()
    settings.prompt_template = cfg.prompts.solver_template
    settings.system_prompt = cfg.prompts.solver_system
    settings.max_prompt_length = cfg.solver.max_prompt_length
    return SolverEvaluator(problems, settings, grader, metric=ev.metric, samples_dir=ev.samples_dir)


def corpus_fact_source(cfg: TrainConfig):
    """The world's worked passages (`Fact: 38 + 47 * 6 = 320.`) as questions with true answers, drawn uniformly:
    plain RL on the facts the Proposer reads (the experiment's positive control)."""
    from pasodoble.io import read_jsonl
    from pasodoble.world import arith

    facts = []
    corpus = (
        cfg.knowledge.path or _tiny_models(cfg).world.corpus
    )  # a real model's run names its world's corpus
    for row in read_jsonl(corpus):
        if row["text"].startswith("Fact: ") and " = " in row["text"]:
            question = f"What is {row['text'][len('Fact: ') :].rsplit(' = ', 1)[0]}?"
            facts.append((question, str(arith.solve(question))))
    if not facts:
        raise ConfigError("oracle.source", "corpus needs a world of worked passages (world.passages=worked)")

    def source(step: int, n: int) -> list[tuple[str, str]]:
        rng = random.Random(derive_seed(cfg.seed, step, "corpus_facts"))
        return [rng.choice(facts) for _ in range(n)]

    return source


def oracle_source(cfg: TrainConfig):
    """Tiny-world questions with true answers, a pure function of (seed, step)."""
    from pasodoble.world import problems

    if cfg.oracle.source == "corpus":
        return corpus_fact_source(cfg)
    tiers = cfg.oracle.tiers

    def source(step: int, n: int) -> list[tuple[str, str]]:
        pairs = []
        for i, tier in enumerate(tiers):
            count = n // len(tiers) + (1 if i < n % len(tiers) else 0)
            pairs += [
                (q, str(a)) for q, a in problems.generate(tier, count, derive_seed(cfg.seed, step, tier))
            ]
        return pairs

    return source


def _evaluator_state(evaluator) -> dict | None:
    """The evaluator's call counter and best score, so `eval/average/is_best` survives a resume."""
    if evaluator is None:
        return None
    return {"calls": evaluator.calls, "best": list(evaluator.best) if evaluator.best else None}


def write_checkpoint(loop: DualPlay, sampler, run_dir: Path, keep_last: int | None) -> Path | None:
    """Rank 0 writes the checkpoint; the others wait. Sharded roles first gather their full state on every rank
    (None for roles whose module is already full: every rank holds the same weights)."""
    roles = [role for role in (loop.proposer, loop.solver) if role is not None]
    states = {role.name: role.full_state() for role in roles}
    if loop.collective.rank != 0:
        loop.collective.barrier(f"checkpoint step {loop.state.step}")
        return None

    def write(tmp: Path) -> None:
        for role in roles:
            role.save(tmp / role.name, states[role.name])
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
        state = {
            "loop": loop.state.state_dict(),
            "sampler": sampler.state_dict() if sampler else None,
            "evaluator": _evaluator_state(loop.evaluator),
        }
        (tmp / "state.json").write_text(json.dumps(state), encoding="utf-8")

    path = checkpoint.save_checkpoint(run_dir, loop.state.step, write, keep_last=keep_last)
    loop.collective.barrier(f"checkpoint step {loop.state.step}")
    return path


def restore(loop: DualPlay, sampler, ckpt: Path) -> None:
    for role in (loop.proposer, loop.solver):
        if role is not None:
            role.load_state(ckpt / role.name)
    state = json.loads((ckpt / "state.json").read_text(encoding="utf-8"))
    loop.state.load_state_dict(state["loop"])
    if sampler is not None and state["sampler"] is not None:
        sampler.load_state_dict(state["sampler"])
    if loop.evaluator is not None and state.get("evaluator"):
        loop.evaluator.calls = state["evaluator"]["calls"]
        loop.evaluator.best = tuple(state["evaluator"]["best"]) if state["evaluator"]["best"] else None
    rng = checkpoint.load_torch_state(ckpt / "rng.pt")
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])


def prepare_resume(run_dir: Path, loop: DualPlay, sampler, *, strict: bool = False) -> int:
    """Restore the newest intact checkpoint (if any; damaged newer ones are reported, or stop the resume when
    `strict`) and cut the logs back to it; returns the inner step resumed at."""
    problem, choice = None, None
    if loop.collective.rank == 0:  # one rank cleans, verifies and sets damaged checkpoints aside
        try:
            checkpoint.refuse_links(run_dir)
            checkpoint.clean_partial(run_dir)
            found = checkpoint.select_for_resume(
                run_dir, strict=strict, warn=lambda line: print(line, file=sys.stderr)
            )
            choice = str(found) if found is not None else None
        except UserError as err:
            problem = str(err)
    problem, choice = loop.collective.broadcast((problem, choice), "resume checkpoint")
    if problem:
        raise UserError(problem)
    ckpt = Path(choice) if choice is not None else None
    if ckpt is not None:
        restore(loop, sampler, ckpt)
    step = loop.state.inner_step
    keep_step = step if ckpt is not None else -1  # no checkpoint: the run starts over
    if loop.collective.rank == 0:
        for name in ("metrics.jsonl", "samples.jsonl"):
            checkpoint.truncate_jsonl(run_dir / name, keep_step)
    if loop.decisions_dir is not None:
        checkpoint.truncate_jsonl(loop.decisions_dir / f"rank-{loop.collective.rank}.jsonl", keep_step)
    loop.collective.barrier("resume")
    return step


def run_train(cfg: TrainConfig, *, resume: bool = False, strict_resume: bool = False) -> Path:
    """Train per `cfg` into cfg.run_dir (continuing it when `resume`); returns the run directory.

    Under `torchrun` / `accelerate launch` every rank runs this; rank 0 alone writes the run directory."""
    check_model_spec(cfg.solver.model, "solver.model")  # before any folder is written or model is built
    if has_proposer(cfg):
        check_model_spec(cfg.proposer.model, "proposer.model")
    threads = resolve_num_threads(cfg.num_threads)
    torch.set_num_threads(threads)
    accel.configure(cfg.accel)  # before any model loads: the kernels load once per process
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    collective = from_env(cfg.distributed.timeout_s)
    try:
        return _train(cfg, collective, resume, strict_resume)
    except (
        RuntimeError,
        OSError,
    ) as e:  # a sharding backend's own collective (DDP, FSDP2, DeepSpeed) lost a peer
        collective.fail_on_peer_loss(e, "training")
        raise
    finally:
        collective.close()


def _prepare_run_dir(cfg: TrainConfig, collective, resume: bool) -> Path:
    """Rank 0 checks and creates the run directory and its config.yaml (on resume config.yaml is rewritten only
    after the checkpoint has loaded: `_run_loop`); every rank learns the outcome."""
    name = cfg.run_dir or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(collective.broadcast(name, "run_dir"))
    problem = None
    if collective.rank == 0:
        try:
            if resume:
                check_folder(run_dir, "train", "--resume")
            elif (run_dir / "metrics.jsonl").exists() and folder_owner(run_dir) == "train":
                problem = f"{run_dir} already holds a run; pass --resume {run_dir} or choose another run_dir"
            else:
                claim_folder(run_dir, "train", "run_dir")
                save_config(cfg, run_dir / "config.yaml")
        except UserError as err:
            problem = str(err)
    problem = collective.broadcast(problem, "run_dir check")
    if problem:
        raise UserError(problem)
    return run_dir


def trains_on_gpu(cfg: TrainConfig, launch: Launch) -> bool:
    """Whether a role of the run sits on a GPU: a GPU is visible and not every role is put on the CPU."""
    return launch.visible_gpus > 0 and any(role.device != "cpu" for role in (cfg.proposer, cfg.solver))


def _train(cfg: TrainConfig, collective, resume: bool, strict_resume: bool = False) -> Path:
    rank0 = collective.rank == 0
    launch = launch_from_env(collective.world_size)
    on_gpu = trains_on_gpu(cfg, launch)
    cfg.distributed.resolved = check_layout(
        cfg,
        launch,
        model_architectures(cfg),
        # the per-GPU memory table, where the run has a GPU to fill (`pasodoble layout` prints it anywhere)
        show=(lambda lines: print("\n".join(lines), flush=True))
        if rank0 and on_gpu and not cfg.logging.quiet
        else None,
    )
    if rank0 and not cfg.logging.quiet and collective.world_size > 1:
        print(describe(cfg.distributed.resolved), flush=True)
    run_dir = _prepare_run_dir(cfg, collective, resume)
    if rank0 and not cfg.logging.quiet:
        threads = torch.get_num_threads()
        print(
            f"run directory: {run_dir} ({threads} torch threads, malloc: {allocator.active()}, "
            f"CPU kernels: {accel.status(threads)})",
            flush=True,
        )
        if (warning := busy_warning(threads)) is not None:
            print(warning, flush=True)
    if collective.world_size > 1 and any(m.startswith(TINY) for m in (cfg.proposer.model, cfg.solver.model)):
        # one rank builds the tiny world's cache (minutes, the first time); the others then find it
        collective.rank0_first(
            "tiny world build", lambda: _tiny_models(cfg), cfg.distributed.prepare_timeout_s
        )
    say = (lambda line: print(line, flush=True)) if rank0 and not cfg.logging.quiet else None
    placement = Placement.for_run(
        cfg.distributed, collective, generating_roles(cfg), launch.visible_gpus, say=say, log_dir=run_dir
    )
    proposer, solver = build_roles(cfg, collective.world_size, placement)
    try:
        return _run_loop(cfg, collective, run_dir, proposer, solver, resume, strict_resume)
    finally:
        close_engines(proposer, solver)


def close_engines(*roles: Role | None) -> None:
    """Stop the roles' engines (vLLM ones hold processes or servers; an HF engine has nothing to stop)."""
    for role in roles:
        if role is not None:
            role.engine.close()


def _run_loop(cfg: TrainConfig, collective, run_dir: Path, proposer, solver, resume, strict_resume) -> Path:
    rank0 = collective.rank == 0
    sampler = build_sampler(cfg, proposer)
    domain = get_domain(cfg.domain)
    with (
        domain.open_checker(cfg.grader) as grader,
        Tracker(run_dir, tensorboard=cfg.logging.tensorboard, wandb_project=cfg.logging.wandb_project)
        if rank0
        else contextlib.nullcontext() as tracker,
    ):
        loop = DualPlay(
            proposer,
            solver,
            grader,
            schedule=cfg.schedule,
            rewards=cfg.rewards,
            prompts=cfg.prompts,
            sampler=sampler,
            seed=cfg.seed,
            run_dir=run_dir,
            tracker=tracker,
            collective=collective,
            question_source=oracle_source(cfg) if cfg.schedule.mode == "oracle" else None,
            evaluator=build_evaluator(cfg, grader),
            on_checkpoint=lambda dp: write_checkpoint(dp, sampler, run_dir, cfg.schedule.keep_last),
            verbose=rank0 and not cfg.logging.quiet,
            decisions_dir=run_dir / "decisions" if cfg.distributed.decisions_log else None,
            domain=domain,
            labels=cfg.labels,
        )
        if resume:
            at = prepare_resume(run_dir, loop, sampler, strict=strict_resume)
            if rank0:  # only now: a resume that fails to load keeps the run's config for the next try
                save_config(cfg, run_dir / "config.yaml")
                mark_folder(run_dir, "train")
            if rank0 and not cfg.logging.quiet:
                print(f"resuming {run_dir} at step {loop.state.step} (inner step {at})", flush=True)
        with stop_on_interrupt(loop, run_dir):
            loop.run()
    if rank0 and not cfg.logging.quiet:
        tiny_solver = cfg.solver.model.startswith(TINY)
        print(
            train_finished(
                run_dir,
                roles=[r.name for r in (proposer, solver) if r is not None],
                tiers=_tiny_models(cfg).world.tiers if tiny_solver else None,
                solver_template=cfg.prompts.solver_template,
            ),
            flush=True,
        )
    if loop.stop_requested:  # stopped by Ctrl-C: callers (experiment, demo, the CLI: exit 130) must not go on
        raise KeyboardInterrupt
    return run_dir
