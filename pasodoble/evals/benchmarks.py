"""The seven math benchmarks of the paper and its peers, as field mappings over the generic loader.

Why: the sets are not shipped with the code (licences, size); a user points at a data directory holding
`<name>/test.jsonl` (the Qwen2.5-Math evaluation layout), or, with network, the loader falls back to a Hugging Face
dataset id. Resolution order: the `data_dir` argument (`--data-dir`), then the `PASODOBLE_DATA_DIR` environment
variable, then the Hugging Face id below. A data directory may be the benchmarks folder itself or a folder that
holds `benchmarks/`.

Run: `pasodoble eval --model M --benchmarks aime24,gsm8k --data-dir DIR`.

Row counts (local files): aime24 30, aime25 30, amc23 40, gsm8k 1319, math500 500, minerva_math 272,
olympiadbench 675. Departures from peers' harnesses: OlympiadBench questions are prefixed by their `context` when
present and golds lose their `$...$` markup; its `unit` field is not appended to the gold (8 rows have one).
The Hugging Face fallbacks were chosen from public harnesses and could not be checked offline; their schemas may
differ from the local files, which is why each has its own mapping.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pasodoble.domains.math import EVAL_SETS as MATH_EVAL_SETS
from pasodoble.errors import UserError
from pasodoble.evals.problems import FieldMap, Problem, load_hf_problems, load_problems_file

DATA_DIR_ENV = "PASODOBLE_DATA_DIR"


@dataclass(frozen=True)
class HFSource:
    """Where a benchmark lives on the Hugging Face Hub, and how its rows map."""

    dataset_id: str  # Hub dataset id
    split: str  # split holding the test problems
    fields: FieldMap  # mapping of that dataset's rows
    config_name: str | None = None  # dataset config, when the id has several


@dataclass(frozen=True)
class Benchmark:
    """A named test set: its local file layout, its mapping, and its Hub fallback."""

    name: str  # the name used on the command line and in tables
    rows: int  # documented row count of the local file
    fields: FieldMap  # mapping of the local file's rows
    hf: HFSource  # fallback when no data directory is given


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark(
            "aime24",
            30,
            FieldMap(question_field="problem", answer_field="answer", id_field="id"),
            HFSource(
                "HuggingFaceH4/aime_2024", "train", FieldMap("problem", answer_field="answer", id_field="id")
            ),
        ),
        Benchmark(
            "aime25",
            30,
            FieldMap(question_field="problem", answer_field="answer"),
            HFSource("math-ai/aime25", "test", FieldMap("problem", answer_field="answer", id_field="id")),
        ),
        Benchmark(
            "amc23",
            40,
            FieldMap(question_field="problem", answer_field="answer", id_field="id"),
            HFSource("math-ai/amc23", "test", FieldMap("question", answer_field="answer", id_field="id")),
        ),
        Benchmark(
            "gsm8k",
            1319,
            FieldMap(
                question_field="question", answer_field="answer", answer_format="hashes", id_field="idx"
            ),
            HFSource(
                "openai/gsm8k",
                "test",
                FieldMap("question", answer_field="answer", answer_format="hashes"),
                "main",
            ),
        ),
        Benchmark(
            "math500",
            500,
            FieldMap(
                question_field="problem", answer_field="answer", answer_format="text", id_field="unique_id"
            ),
            HFSource(
                "HuggingFaceH4/MATH-500",
                "test",
                FieldMap("problem", answer_field="answer", answer_format="text", id_field="unique_id"),
            ),
        ),
        Benchmark(
            "minerva_math",
            272,
            FieldMap(
                question_field="problem", answer_field="solution", answer_format="boxed", id_field="idx"
            ),
            HFSource("math-ai/minervamath", "test", FieldMap("question", answer_field="answer")),
        ),
        Benchmark(
            "olympiadbench",
            675,
            FieldMap(question_template="{context}\n{question}", answer_field="final_answer", id_field="id"),
            HFSource(
                "Hothan/OlympiadBench",
                "train",
                FieldMap(
                    question_template="{context}\n{question}", answer_field="final_answer", id_field="id"
                ),
                "OE_TO_maths_en_COMP",
            ),
        ),
    ]
}

PAPER_BENCHMARKS = MATH_EVAL_SETS  # the paper's AVG columns, the math domain's evaluation sets


def resolve_data_dir(data_dir: str | Path | None = None) -> Path | None:
    """The benchmark folder from the argument or the environment variable; None when neither is set."""
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or None
    if chosen is None:
        return None
    root = Path(chosen).expanduser()
    if not root.is_dir():
        where = "--data-dir" if data_dir is not None else DATA_DIR_ENV
        raise UserError(f"{where}: {root} is not a directory")
    return root / "benchmarks" if (root / "benchmarks").is_dir() else root


def parse_benchmark_names(spec: str | list[str]) -> list[str]:
    """'aime24,gsm8k' or 'all' or 'paper' -> checked names."""
    names = spec if isinstance(spec, list) else [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["all"]:
        return list(BENCHMARKS)
    if names == ["paper"]:
        return list(PAPER_BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise UserError(
            f"--benchmarks: unknown {', '.join(unknown) or '(empty)'}; choose from {', '.join(BENCHMARKS)}, "
            "'all' or 'paper' (or use --dataset FILE for your own set)"
        )
    return names


def load_benchmark(
    name: str, data_dir: str | Path | None = None, *, limit: int | None = None
) -> list[Problem]:
    """Problems of one named benchmark: local `<data_dir>/<name>/test.jsonl`, else its Hugging Face id."""
    if name not in BENCHMARKS:
        parse_benchmark_names([name])
    bench = BENCHMARKS[name]
    root = resolve_data_dir(data_dir)
    if root is not None:
        path = root / name / "test.jsonl"
        if not path.is_file():
            raise UserError(f"{path}: not found; --data-dir / {DATA_DIR_ENV} must hold {name}/test.jsonl")
        return load_problems_file(path, bench.fields, source=name, limit=limit)
    hf = bench.hf
    try:
        return load_hf_problems(
            hf.dataset_id, hf.fields, split=hf.split, config_name=hf.config_name, source=name, limit=limit
        )
    except UserError as err:
        raise UserError(f"{name}: no --data-dir or {DATA_DIR_ENV} given, and {err}") from err
