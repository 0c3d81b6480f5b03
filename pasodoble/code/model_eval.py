"""`pasodoble code-eval --model M`: completions generated through the roles' engines, checked in the sandbox.

    pasodoble code-eval --model pkg:smollm2-135m-instruct --out runs/he-smollm2              # greedy pass@1
    pasodoble code-eval --model M --n 10 --temperature 0.8 --k 1,10 --engine vllm --out runs/he-m

Generation, resumption, progress and samples.jsonl are `pasodoble eval`'s (`evals.runner.evaluate`, engines from
`rollout/factory.py` through `evals.engine`); only the grader differs: `CodeGrader` turns each completion into a
program and asks the sandbox. Prompt styles:
- raw (default): the HumanEval prompt as plain text without its trailing newline, continued by the model (no chat
  template, as the Codex paper evaluated); generation stops at a new top-level `def`/`class`/`if __name__`/`print(`/`assert` line or a closing
  fence (`RAW_STOPS`), and the completion is cut there before it runs.
- chat: the prompt in a user turn of the chat template asking for the whole function in a fenced block; the
  answer's first fenced block runs after the prompt (its definitions replace the stub), or, without a fence, the
  answer continues the prompt. No stop strings: chat models end their turn.
- chat-prefix: a user turn asking to complete the function, then the assistant's answer begun as a python block
  holding the prompt; the model continues the code, cut as in raw (a closing fence ends it too).
pass@k uses the unbiased estimator over the n samples of each problem (`passk.py`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from pasodoble.code.passk import mean_pass_at_k
from pasodoble.code.problems import CodeProblem, job_for, program_for
from pasodoble.errors import ConfigError, UserError
from pasodoble.evals.cli import default_label, load_tokenizer_and_config, resolve_model_spec, start_run
from pasodoble.evals.engine import check_engine_flags, engine_role, open_engine, resolve_dtype
from pasodoble.evals.problems import Problem
from pasodoble.evals.report import build_results, render_run_markdown
from pasodoble.evals.samples import load_resume_state
from pasodoble.evals.settings import EvalSettings, settings_dict
from pasodoble.grader.grader import GradeBatch, Verdict
from pasodoble.io import write_json_atomic, write_text_atomic
from pasodoble.roles.models import check_model_spec
from pasodoble.sandbox import SandboxConfig, check, probe

RAW_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert ", "\n```")
INSTRUCTION = "Complete the following Python function."
CHAT_TEMPLATE = (
    f"{INSTRUCTION} Reply with the whole function, imports included, in one ```python code block.\n\n"
    "```python\n{question}```"
)


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    """`text` up to the first of `stops` (the engine may have run a few characters past it)."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def code_head(problem: CodeProblem, style: str) -> str:
    """The code a continuing style's completion follows: the prompt without its trailing whitespace, so the model
    writes the body's first line break and indent itself (a prompt ending in a blank line reads as finished code)."""
    return problem.prompt if style == "chat" else problem.prompt.rstrip()


def completion_program(problem: CodeProblem, response: str, style: str) -> str:
    """The program a generated response stands for (see the module docstring)."""
    if style == "chat":
        return program_for(problem, response)
    return code_head(problem, style) + cut_at_stops(response, RAW_STOPS)


def style_settings(style: str) -> tuple[str, bool, tuple[str, ...]]:
    """(prompt template, use the chat template?, stop strings) of a prompt style; see `style_question`."""
    return (CHAT_TEMPLATE, True, ()) if style == "chat" else ("{question}", False, RAW_STOPS)


def style_question(style: str, prompt: str, tokenizer) -> str:
    """The question `evaluate` renders for one prompt: the prompt itself, or (chat-prefix) the chat template's user
    turn asking to complete it, then the assistant's answer begun as a python block holding it, as plain text."""
    if style != "chat-prefix":
        return prompt.rstrip() if style == "raw" else prompt
    user = [{"role": "user", "content": f"{INSTRUCTION}\n\n```python\n{prompt}```"}]
    text = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=False)
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and tokenizer("")["input_ids"]:  # tokenising the text adds it again
        text = text[len(bos) :]
    return f"{text}```python\n{prompt.rstrip()}"


class CodeGrader:
    """The grader `evals.runner.evaluate` calls: gold = task id, response = completion, verdict from the sandbox.

    `extracted` holds what ran after the prompt (the cut completion, or the fenced block), for audit."""

    def __init__(self, problems: Sequence[CodeProblem], style: str, config: SandboxConfig, workers: int):
        self.problems = {p.task_id: p for p in problems}
        self.style, self.config, self.workers = style, config, workers

    def __enter__(self) -> CodeGrader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Nothing to release: every check is its own launch."""

    def grade(self, golds: Sequence[str], responses: Sequence[str], *, extract: bool = True) -> GradeBatch:
        problems = [self.problems[g] for g in golds]
        programs = [completion_program(p, r, self.style) for p, r in zip(problems, responses, strict=True)]
        with ThreadPoolExecutor(self.workers) as pool:
            results = list(pool.map(lambda pp: check(job_for(*pp), self.config), zip(problems, programs)))
        statuses = Counter(v.status for v in results)
        counters = {"checks": len(results), "timeouts": statuses["timeout"]}
        counters["errors"] = statuses["sandbox_error"] + statuses["refused"] + statuses["crashed"]
        counters |= {f"status/{name}": count for name, count in statuses.items()}
        verdicts = [
            Verdict(v.passed, v.status, program[len(code_head(p, self.style)) :])
            for v, p, program in zip(results, problems, programs)
        ]
        return GradeBatch(verdicts, counters)


class WithStops:
    """A `RolloutEngine` that adds stop strings to every call (`evaluate` builds its SamplingParams without)."""

    def __init__(self, engine, stops: tuple[str, ...]):
        self.engine, self.stops = engine, stops
        self.copies_weights = engine.copies_weights

    def generate(self, prompt_ids, sampling, on_batch=None, on_progress=None):
        return self.engine.generate(prompt_ids, replace(sampling, stop=self.stops), on_batch, on_progress)

    def update_weights(self, model) -> None:
        self.engine.update_weights(model)

    def close(self) -> None:
        self.engine.close()


def as_eval_problems(problems: Sequence[CodeProblem], source: str, style: str, tokenizer) -> list[Problem]:
    """The generic eval problems `evaluate` iterates: the question from the prompt, the task id as the gold."""
    return [
        Problem(p.task_id, style_question(style, p.prompt, tokenizer), (p.task_id,), source) for p in problems
    ]


def code_digest(problems: Sequence[CodeProblem]) -> str:
    """Fingerprint of prompts and tests, so a resumed run cannot keep verdicts against edited tests."""
    text = json.dumps([[p.task_id, p.prompt, p.tests, p.entry_point] for p in problems], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pass_at_ks(rows_by_problem: Sequence[Sequence[dict]], ks: Sequence[int]) -> dict[str, float | None]:
    """{"pass@k": unbiased mean over problems} from each problem's sample rows."""
    counts = [(len(rows), sum(bool(r["correct"]) for r in rows)) for rows in rows_by_problem]
    return {f"pass@{k}": mean_pass_at_k(counts, k) for k in ks}


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    template, chat, _ = style_settings(args.prompt_style)
    settings = EvalSettings(
        num_samples=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        prompt_template=template,
        use_chat_template=chat,
        chunk_size=args.chunk_size,
    )
    settings.validate()
    return settings


def check_sandbox() -> None:
    """Refuse before any generation when the sandbox's essential layers are missing (every check would be
    `refused` after hours of sampling)."""
    found = probe()
    if not found["essential_ok"]:
        why = "; ".join(f"{k}: {v}" for k, v in found["why"].items())
        raise UserError(f"code-eval --model: the sandbox cannot run here ({why}); run make sandbox-env")


FLAG_OF = {
    "num_samples": "--n",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "max_new_tokens": "--max-new-tokens",
    "chunk_size": "--chunk-size",
}


def checked_settings(args: argparse.Namespace, ks: Sequence[int]) -> EvalSettings:
    """The sampling flags as `EvalSettings`, each mistake one line naming its flag."""
    try:
        settings = settings_from_args(args)
    except ConfigError as e:
        raise UserError(f"{FLAG_OF.get(e.where, e.where)}: {e.message}") from None
    if max(ks) > args.n:
        raise UserError(f"--k {max(ks)}: pass@{max(ks)} needs --n >= {max(ks)} samples per problem")
    if args.n > 1 and args.temperature == 0:
        raise UserError(
            f"--n {args.n} at --temperature 0 gives {args.n} identical greedy samples; set a temperature"
        )
    return settings


def check_model_flags(args: argparse.Namespace, ks: Sequence[int]) -> EvalSettings:
    """Every `--model` flag checked (the model spec, sampling, engine, the sandbox) before a problem is read or torch
    is imported; returns the sampling settings."""
    check_model_spec(args.model, "--model")
    settings = checked_settings(args, ks)
    check_engine_flags(args)
    check_sandbox()
    return settings


def run_model_eval(
    args: argparse.Namespace, problems: list[CodeProblem], source: str, ks: list[int], settings: EvalSettings
) -> int:
    """Generate `--n` completions per problem with `--model` (flags checked by `check_model_flags`), check them,
    write the run folder (resumable)."""
    stops = style_settings(args.prompt_style)[2]
    identity = {
        "model": args.model,
        "sources": {source: len(problems)},
        "problems_sha256": code_digest(problems),
        "settings": settings_dict(settings),
        "prompt_style": args.prompt_style,
        "stop": list(stops),
    }
    start_run(args, identity)
    # torch loads here, after the flags and the run folder are checked
    from pasodoble.evals.runner import evaluate, render_prompt
    from pasodoble.scale.collectives import SingleProcess

    print(f"evaluating {args.model} on {len(problems)} {source} problems -> {args.out}", flush=True)
    args.model_path = resolve_model_spec(args.model)
    tokenizer, model_config = load_tokenizer_and_config(args.model_path, args.model)
    eval_problems = as_eval_problems(problems, source, args.prompt_style, tokenizer)
    longest = max(len(render_prompt(p.question, settings, tokenizer)[1]) for p in eval_problems)
    role = engine_role(
        args,
        dtype=resolve_dtype(args.dtype, model_config),
        max_prompt_length=longest,
        max_completion_length=settings.max_new_tokens,
    )
    engine = open_engine(args, role, tokenizer, SingleProcess())
    grader = CodeGrader(problems, args.prompt_style, SandboxConfig(timeout_s=args.timeout_s), args.workers)
    samples = args.out / "samples.jsonl"
    try:
        report = evaluate(
            WithStops(engine, stops) if stops else engine,
            tokenizer,
            eval_problems,
            settings,
            grader,
            samples_path=samples,
            progress=not args.no_progress,
        )
    finally:
        engine.close()
    rows = load_resume_state(samples, args.n).finished
    by_problem = [rows[(p.source, p.id)] for p in eval_problems]
    arguments = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "func"}
    result = build_results(
        report,
        settings_dict(settings),
        label=args.label or default_label(args.model),
        model=args.model,
        extra={
            "engine": args.engine,
            "prompt_style": args.prompt_style,
            "stop": list(stops),
            "pass_at_k": pass_at_ks(by_problem, ks),
            "statuses": dict(Counter(r["status"] for rs in by_problem for r in rs)),
            "arguments": arguments,
        },
    )
    write_json_atomic(args.out / "results.json", result)
    scores = ", ".join(f"{k} {100 * v:.2f}%" for k, v in result["pass_at_k"].items() if v is not None)
    summary = (
        f"{source}: {len(problems)} problems x {args.n} samples: {scores} (statuses {result['statuses']})"
    )
    write_text_atomic(args.out / "results.md", render_run_markdown(result) + f"\n\n{summary}\n")
    print(
        f"{summary}\n{report.samples_generated} samples generated now in {report.seconds:.1f} s; "
        f"wrote {args.out / 'results.md'}, results.json and samples.jsonl"
    )
    return 0
