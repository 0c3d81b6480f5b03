"""The `world:` config section, checked without torch: `WorldConfig` (the tiny world's data, tiers and SFT mix)
and `ModelConfig` (the size of its Qwen3 base). `build.py` and `model.py` build them and re-export them; they are
apart so that a recipe is read and checked before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pasodoble.errors import ConfigError
from pasodoble.world import problems
from pasodoble.world.select import SelectConfig


@dataclass
class ModelConfig:
    hidden_size: int = 96  # width of the residual stream
    intermediate_size: int = 256  # width of each MLP
    num_hidden_layers: int = 4  # transformer blocks
    num_attention_heads: int = 4  # query heads
    num_key_value_heads: int = 2  # key/value heads (grouped-query attention, as in Qwen3)
    head_dim: int = 24  # width of each head
    max_position_embeddings: int = 256  # longest prompt + completion, in tokens


@dataclass
class WorldConfig:
    seed: int = 0  # seeds every random choice of the world (data, tokenizer, model init)
    # what the world is about: "math" (arithmetic) or "code" (tiny programs, `world/code_world.py`; domain: code)
    game: str = "math"
    corpus_size: int = 2000  # passages in corpus.jsonl
    tier_size: int = 100  # held-out problems per tier in tiers.jsonl
    sft_solver_examples: int = 20_000  # Solver SFT examples
    sft_proposer_examples: int = 3_000  # Proposer SFT examples (about 13% of the joint SFT data)
    sft_tiers: list[str] = field(default_factory=lambda: ["t1", "t2"])  # tiers the SFT data is mostly made of
    sft_tier_weights: list[float] | None = field(default_factory=lambda: [1.0, 2.0])  # weights of sft_tiers
    next_tier: str | None = "t3"  # the tier above the SFT data that gets a small share (None: no bridge)
    next_tier_share: float = (
        0.25  # share of next-tier examples in the Solver SFT data (0.14 before the stop rule)
    )
    bridge_share: float = 0.12  # share of training-only t1b sums (A + C, C three-digit) in Solver SFT data
    top_tier_share: float = 0.0  # share of t4 in the Solver SFT data, so t4 starts above a pass rate of 0
    proposer_next_tier_share: float = 0.1  # share of next-tier questions in the Proposer SFT data ("numbers")
    # corpus kind: "numbers" (fact sheets) or "worked" (solved expressions of every tier; see corpus.py)
    passages: str = "numbers"
    # Proposer answer part: "worked" (steps, then the boxed answer) or "copied" (the boxed answer alone; with worked
    # passages it is the passage's value, so the Proposer learns to copy its label from the knowledge)
    proposer_answer: str = "worked"
    vocab_size: int = 320  # BPE vocabulary, special and format tokens included
    model: ModelConfig = field(default_factory=ModelConfig)  # size of the tiny Qwen3 base
    # when the SFT warm-up stops: at the first check where the next tier is half-learned (world/select.py)
    select: SelectConfig = field(default_factory=SelectConfig)

    def validate(self) -> None:
        self.select.validate()
        if self.game not in ("math", "code"):
            raise ConfigError("world.game", f"must be 'math' or 'code', got {self.game!r}")
        if self.game == "code" and self.select.every:
            raise ConfigError("world.select.every", "the code world has no next-tier stop; set it to 0")
        named = [("sft_tiers", t) for t in self.sft_tiers] + [("next_tier", self.next_tier)] * bool(
            self.next_tier
        )
        for where, tier in named:
            if tier not in problems.TIERS:
                raise ConfigError(f"world.{where}", f"unknown tier {tier!r}; use {', '.join(problems.TIERS)}")
        if not self.sft_tiers:
            raise ConfigError("world.sft_tiers", "needs at least one tier, e.g. [t1, t2]")
        weights = self.sft_tier_weights
        if weights is not None and (len(weights) != len(self.sft_tiers) or min(weights) <= 0):
            raise ConfigError(
                "world.sft_tier_weights", "needs one positive weight per entry of sft_tiers, e.g. [1, 2]"
            )
        for name in ("next_tier_share", "bridge_share", "top_tier_share", "proposer_next_tier_share"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"world.{name}", "must be in [0, 1), e.g. 0.04")
        if self.next_tier_share + self.bridge_share + self.top_tier_share >= 1.0:
            raise ConfigError(
                "world.bridge_share", "next_tier_share + bridge_share + top_tier_share must stay below 1"
            )
        top = problems.TIERS[-1]
        if self.top_tier_share > 0 and (self.next_tier == top or top in self.sft_tiers):
            raise ConfigError(
                "world.top_tier_share", "t4 is already next_tier or an SFT tier; leave this at 0"
            )
        for name in ("corpus_size", "tier_size", "sft_solver_examples", "sft_proposer_examples"):
            if getattr(self, name) < 1:
                raise ConfigError(f"world.{name}", "must be at least 1")
        if self.passages not in ("numbers", "worked"):
            raise ConfigError("world.passages", f"must be 'numbers' or 'worked', got {self.passages!r}")
        if self.proposer_answer not in ("worked", "copied"):
            raise ConfigError(
                "world.proposer_answer", f"must be 'worked' or 'copied', got {self.proposer_answer!r}"
            )
        if self.vocab_size < 300:
            raise ConfigError(
                "world.vocab_size", "must be at least 300 (256 bytes + special and format tokens)"
            )

    @classmethod
    def minimal(cls, seed: int = 0) -> WorldConfig:
        """The smallest world that still writes every file: for tests and smoke runs (seconds, not minutes)."""
        return cls(
            seed=seed,
            corpus_size=20,
            tier_size=4,
            sft_solver_examples=200,
            sft_proposer_examples=100,
            model=ModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, head_dim=8),
            select=SelectConfig(every=0),
        )

    def mix(self, share: float, bridge: float = 0.0, top: float = 0.0) -> dict[str, float]:
        """Tier weights of SFT data: `share` of the next tier, `bridge` of t1b sums, `top` of t4, the rest by
        `sft_tier_weights`."""
        if self.next_tier is None:
            share = 0.0
        relative = self.sft_tier_weights or [1.0] * len(self.sft_tiers)
        weights = {
            tier: (1.0 - share - bridge - top) * w / sum(relative)
            for tier, w in zip(self.sft_tiers, relative)
        }
        for tier, extra in ((self.next_tier, share), (problems.BRIDGE, bridge), (problems.TIERS[-1], top)):
            if extra > 0:
                weights[tier] = weights.get(tier, 0.0) + extra
        return weights
