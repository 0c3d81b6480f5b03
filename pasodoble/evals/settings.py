"""What an evaluation generates, checked without torch: `EvalSettings` (the sampling and prompt of `evaluate`,
recorded in results.json) and `EvalConfig` (the `eval:` section of a train recipe, the in-training evaluation).

Apart from `runner.py` and `periodic.py` (which re-export them) so that a recipe is read and checked before torch is
imported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pasodoble.errors import ConfigError

DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass
class EvalSettings:
    """Everything that decides the generated text; recorded verbatim in results.json."""

    num_samples: int = 1  # k samples per problem (the paper: 6)
    temperature: float = 0.0  # 0 = greedy; the paper samples at 0.6
    top_p: float = 1.0  # nucleus mass
    top_k: int | None = None  # sample only from the k most likely tokens (None or 0: off)
    min_p: float | None = None  # drop tokens below min_p x the top token's probability (None or 0: off)
    max_new_tokens: int = 2048  # completion budget in tokens
    seed: int = 0  # base seed; each chunk's seed derives from it and the chunk's first problem index
    prompt_template: str = DEFAULT_TEMPLATE  # user message; `{question}` is replaced by the question text
    system_prompt: str | None = None  # optional system message (or plain-text preamble)
    use_chat_template: bool = True  # wrap in the tokenizer's chat template; False: the raw rendered template
    max_prompt_length: int | None = None  # keep the last N prompt tokens; None keeps all
    chunk_size: int = 64  # problems per engine call; fixes the seed boundaries, so keep it when resuming

    def validate(self) -> None:
        if self.num_samples < 1:
            raise ConfigError("num_samples", f"must be >= 1, got {self.num_samples}")
        if self.temperature < 0:
            raise ConfigError("temperature", f"must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0
        ):
            raise ConfigError("top_k", f"must be an integer >= 0 (0 or None: off), got {self.top_k!r}")
        if self.min_p is not None and not 0 <= self.min_p < 1:
            raise ConfigError("min_p", f"must be in [0, 1) (0 or None: off), got {self.min_p}")
        for name in ("max_new_tokens", "chunk_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if "{question}" not in self.prompt_template:
            raise ConfigError("prompt_template", "must contain the placeholder {question}")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise ConfigError("max_prompt_length", "must be >= 1, or None for no limit")


@dataclass
class EvalConfig:
    """Which problems the Solver is evaluated on during training, and how."""

    problems_file: str | None = None  # held-out JSONL/Parquet (fields below); preferred for checkpoint choice
    question_field: str = "question"  # question field of problems_file
    answer_field: str = "answer"  # gold answer field of problems_file
    benchmarks: list[str] = field(default_factory=list)  # built-in sets to watch (never pick the best)
    data_dir: str | None = None  # where the built-in sets live (else PASODOBLE_DATA_DIR, else the Hub)
    limit: int | None = 64  # first N problems of each set; None: all
    num_samples: int = 1  # k samples per problem
    temperature: float = 0.0  # 0 = greedy
    top_k: int | None = None  # sample only from the k most likely tokens (None or 0: off)
    min_p: float | None = None  # drop tokens below min_p x the top token's probability (None or 0: off)
    max_new_tokens: int = 512  # completion budget
    prompt_template: str = DEFAULT_TEMPLATE  # user message with a {question} placeholder
    seed: int = 0  # generation seed
    metric: str = "avg@k"  # the average metric that decides the best evaluation
    samples_dir: str | None = (
        None  # write each evaluation's samples here as eval-<call>.jsonl; None: keep none
    )

    def validate(self) -> None:
        if not self.problems_file and not self.benchmarks:
            raise ConfigError("eval.problems_file", "give a held-out problems file or eval.benchmarks")
        if self.metric not in ("avg@k", "pass@k", "maj@k"):
            raise ConfigError("eval.metric", f"{self.metric!r} is not one of avg@k, pass@k, maj@k")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("eval.limit", "must be >= 1, or None for every problem")
        self.settings().validate()  # sampling fields, at config time rather than at the first evaluation

    def settings(self) -> EvalSettings:
        return EvalSettings(
            num_samples=self.num_samples,
            temperature=self.temperature,
            top_k=self.top_k,
            min_p=self.min_p,
            max_new_tokens=self.max_new_tokens,
            prompt_template=self.prompt_template,
            seed=self.seed,
        )


def settings_dict(settings: EvalSettings) -> dict:
    """The settings as recorded in results.json."""
    return asdict(settings)
