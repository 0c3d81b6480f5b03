"""The tiny QA world: an invented corpus of facts with held-out tiers and a programmatic cold-start teacher.

What: `make_world(QAWorldConfig(seed=0))` invents people and towns with made-up names (so a model cannot know them
from pre-training) and relations between them: each person was born in a town, practises a craft and learned it
from a mentor; each town lies on a river. Every fact is stated in the corpus (one passage per person, one per
town). Facts are split at random into tiers:
- `sft`: its question and answer also appear in the Solver's SFT data (what the Solver was told);
- `corpus`: stated only in the corpus, never in SFT data (what dual-play must teach a closed-book Solver);
- `multihop`: two corpus facts composed ("Where was the mentor of X born?"), never asked in SFT data.
The teacher writes cold-start records in the SFT format (`{"prompt", "completion"}`): Proposer records ask about
a passage's facts by their relation's question template, in the QA tags (`<question>`, `<answer>`, `<alias>`), and
pass the QA gates (checked here, so a teacher bug cannot ship): `sft`-tier facts only (`proposer_facts="sft"`, the
default), or every fact the passage states, any tier (`"all"`: the Proposer reads the corpus, so it may be taught to
ask about all of it); Solver records answer `sft`-tier questions only, as `Answer: X`, whatever `proposer_facts`.

Why: the claim of QA dual-play in miniature needs a corpus whose facts the Solver provably did not know; with
invented names the only route to a `corpus`-tier answer is the corpus, through the Proposer's questions.

How to run: `python -m pasodoble.qa.world --out runs/qa-world` (or `write_world(make_world(QAWorldConfig()), DIR)`)
writes corpus.jsonl, sft_proposer.jsonl, sft_solver.jsonl and heldout.jsonl; evaluate with `pasodoble eval
--grading qa --dataset runs/qa-world/heldout.jsonl --alias-field aliases --group-field tier ...`. Pure data: no
models, no training here.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from pasodoble.errors import ConfigError
from pasodoble.io import write_text_atomic
from pasodoble.qa.normalize import canonical
from pasodoble.qa.proposal import parse_qa_proposal

TIERS = ("sft", "corpus", "multihop")
PROPOSER_FACTS = (
    "sft",
    "all",
)  # what the teacher's Proposer records ask about (QAWorldConfig.proposer_facts)
CRAFTS = (
    "weaving",
    "glassblowing",
    "masonry",
    "cartography",
    "brewing",
    "bookbinding",
    "pottery",
    "smithing",
)
_SYLLABLES = (
    "ka",
    "vel",
    "mo",
    "ra",
    "tor",
    "lin",
    "osk",
    "dru",
    "fen",
    "sa",
    "bri",
    "nal",
    "quo",
    "zem",
    "ith",
)
PROPOSER_CUE = (
    "{passage}\nAsk a question."  # tiny models learn the task from SFT data; the cue names the role
)
SOLVER_CUE = "{question}"


@dataclass(frozen=True)
class QAWorldConfig:
    seed: int = 0  # decides every name, relation and split
    num_people: int = 40  # people invented (each has a town, a craft and a mentor)
    num_towns: int = 12  # towns invented (each lies on a river)
    sft_fraction: float = 0.5  # share of single facts whose question also appears in the Solver's SFT data
    multihop_fraction: float = 1.0  # share of people asked the composed question (mentor's birthplace)
    # the teacher's Proposer records ask about "sft"-tier facts only, or "all" facts each passage states (any tier)
    proposer_facts: str = "sft"

    def validate(self) -> None:
        if self.num_people < 2 or self.num_towns < 1:
            raise ConfigError("num_people", "num_people must be >= 2 and num_towns >= 1")
        if not 0 < self.sft_fraction < 1:
            raise ConfigError("sft_fraction", f"must be in (0, 1), got {self.sft_fraction}")
        if not 0 <= self.multihop_fraction <= 1:
            raise ConfigError("multihop_fraction", f"must be in [0, 1], got {self.multihop_fraction}")
        if self.proposer_facts not in PROPOSER_FACTS:
            raise ConfigError(
                "proposer_facts", f"must be one of {', '.join(PROPOSER_FACTS)}, got {self.proposer_facts!r}"
            )


@dataclass(frozen=True)
class Fact:
    id: str
    question: str
    answer: str
    aliases: tuple[str, ...]
    tier: str  # one of TIERS
    passage: int | None  # index of the passage that states it (None: multi-hop, stated across two)


@dataclass
class QAWorld:
    passages: list[str]
    facts: list[Fact]
    sft_proposer: list[dict] = field(default_factory=list)
    sft_solver: list[dict] = field(default_factory=list)


def _names(count: int, parts: int, rng: random.Random, taken: set[str]) -> list[str]:
    """`count` new capitalised names of `parts` syllables; each normalises to itself (no article, no number)."""
    out: list[str] = []
    while len(out) < count:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()
        if name.lower() not in taken and canonical(name) == name.lower():
            taken.add(name.lower())
            out.append(name)
    return out


def make_world(cfg: QAWorldConfig) -> QAWorld:
    """The corpus, the tiered facts and the teacher's records of one seed."""
    cfg.validate()
    rng = random.Random(cfg.seed)
    taken: set[str] = set()
    towns = _names(cfg.num_towns, 2, rng, taken)
    rivers = _names(cfg.num_towns, 3, rng, taken)
    people = [
        f"{a} {b}"
        for a, b in zip(_names(cfg.num_people, 2, rng, taken), _names(cfg.num_people, 3, rng, taken))
    ]
    home = {p: rng.choice(towns) for p in people}
    craft = {p: rng.choice(CRAFTS) for p in people}
    mentor = {p: rng.choice([q for q in people if q != p]) for p in people}
    passages, facts = [], []
    for i, town in enumerate(towns):
        passages.append(f"The town of {town} lies on the river {rivers[i]}.")
        facts.append(
            Fact(f"river-{town}", f"On which river does the town of {town} lie?", rivers[i], (), "", i)
        )
    for p in people:
        index, surname = len(passages), mentor[p].split()[1]
        passages.append(f"{p} was born in {home[p]}. {p} practised {craft[p]}, learned from {mentor[p]}.")
        facts.append(Fact(f"home-{p}", f"In which town was {p} born?", home[p], (), "", index))
        facts.append(Fact(f"craft-{p}", f"Which craft did {p} practise?", craft[p], (), "", index))
        facts.append(
            Fact(f"mentor-{p}", f"From whom did {p} learn a craft?", mentor[p], (surname,), "", index)
        )
    split = [replace(f, tier="sft" if rng.random() < cfg.sft_fraction else "corpus") for f in facts]
    hops = [
        Fact(f"hop-{p}", f"In which town was the mentor of {p} born?", home[mentor[p]], (), "multihop", None)
        for p in rng.sample(people, round(cfg.multihop_fraction * len(people)))
    ]
    world = QAWorld(passages, split + hops)
    asked = [f for f in split if cfg.proposer_facts == "all" or f.tier == "sft"]
    world.sft_proposer = [proposer_record(world.passages[f.passage], f) for f in asked]
    world.sft_solver = [solver_record(f) for f in split if f.tier == "sft"]
    return world


def proposer_record(passage: str, fact: Fact) -> dict[str, str]:
    """A Proposer SFT record for `fact`, checked against the QA gates (a teacher bug raises, never ships)."""
    completion = f"<question>{fact.question}</question><answer>{fact.answer}</answer>" + "".join(
        f"<alias>{a}</alias>" for a in fact.aliases
    )
    proposal = parse_qa_proposal(completion, passage)
    if not proposal.valid:
        raise AssertionError(
            f"qa world teacher wrote an invalid proposal ({proposal.invalid_reason}): {completion}"
        )
    return {"prompt": PROPOSER_CUE.replace("{passage}", passage), "completion": completion}


def solver_record(fact: Fact) -> dict[str, str]:
    """A Solver SFT record: the question alone, answered as `Answer: X`."""
    return {"prompt": SOLVER_CUE.replace("{question}", fact.question), "completion": f"Answer: {fact.answer}"}


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_world(world: QAWorld, out: Path) -> dict[str, Path]:
    """Write the world's four files atomically into `out`; returns their paths by name."""
    out.mkdir(parents=True, exist_ok=True)
    held = [
        {"id": f.id, "question": f.question, "answer": f.answer, "aliases": list(f.aliases), "tier": f.tier}
        for f in world.facts
    ]
    files = {
        "corpus": [{"text": text} for text in world.passages],
        "sft_proposer": world.sft_proposer,
        "sft_solver": world.sft_solver,
        "heldout": held,
    }
    paths = {name: out / f"{name}.jsonl" for name in files}
    for name, rows in files.items():
        write_text_atomic(paths[name], _jsonl(rows))
    return paths


def main(argv: list[str] | None = None) -> int:
    """`python -m pasodoble.qa.world --out DIR [--seed S]`: the world's four files, for a recipe's corpus."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m pasodoble.qa.world", description="write the tiny QA world's files (no models)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="decides every name, relation and split [0]")
    args = parser.parse_args(argv)
    for name, path in write_world(make_world(QAWorldConfig(seed=args.seed)), args.out).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
