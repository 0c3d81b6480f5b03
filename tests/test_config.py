"""Config loader: types are strict, unknown keys and bad values name the field and the fix, round trips hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from pasodoble.config import apply_override, from_dict, load_config, save_config
from pasodoble.errors import ConfigError


@dataclass
class Role:
    model: str = "base"  # path or hub id
    lr: float = 1e-6  # learning rate
    num_generations: int = 6  # samples per prompt
    trainable: bool = True  # whether the role is updated
    top_p: float | None = None  # None: off

    def validate(self) -> None:
        if self.lr <= 0:
            raise ConfigError("lr", "must be > 0")


@dataclass
class Schedule:
    mode: Literal["online", "offline"] = "online"  # schedule
    steps: int = 10  # total steps
    tags: list[str] = field(default_factory=list)  # free labels


@dataclass
class Top:
    proposer: Role = field(default_factory=Role)
    solver: Role = field(default_factory=Role)
    schedule: Schedule = field(default_factory=Schedule)


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("solver:\n  lr: 1e-5\n  trainable: false\nschedule:\n  mode: offline\n  tags: [a, b]\n")
    cfg = load_config(Top, p, ["proposer.num_generations=8", "solver.top_p=0.9", "schedule.steps=3"])
    assert cfg.solver.lr == 1e-5 and cfg.solver.trainable is False and cfg.solver.top_p == 0.9
    assert cfg.proposer.num_generations == 8 and cfg.proposer.lr == 1e-6
    assert cfg.schedule.mode == "offline" and cfg.schedule.tags == ["a", "b"] and cfg.schedule.steps == 3


@pytest.mark.parametrize(
    "override, where, words",
    [
        ("solver.lrr=1", "solver.lrr", "did you mean 'lr'"),
        ("solver.trainable=1", "solver.trainable", "true or false"),
        ("solver.num_generations=2.5", "solver.num_generations", "integer"),
        ("solver.lr=fast", "solver.lr", "number"),
        ("schedule.mode=sideways", "schedule.mode", "one of 'online', 'offline'"),
        ("solver.lr=-1", "solver.lr", "must be > 0"),
        ("solver", "solver", "section.field=value"),
        ("solver.lr.x=1", "solver.lr.x", "is a value"),
        ("schedule.tags=[a,b=[c]]", "schedule.tags", "not valid YAML"),
    ],
)
def test_errors_name_the_field(override, where, words):
    with pytest.raises(ConfigError) as e:
        load_config(Top, None, ["solver.lr=1e-3", override])
    assert e.value.where == where and words in e.value.message


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(Top, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("solver: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(Top, bad)
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(Top, tmp_path / "list.yaml")


def test_save_round_trip(tmp_path):
    cfg = load_config(Top, None, ["schedule.tags=[x]", "proposer.top_p=0.5"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(Top, tmp_path / "config.yaml") == cfg
    assert from_dict(Top, {}) == Top()


def test_override_builds_nested_sections():
    data: dict = {}
    apply_override(data, "a.b.c=[1, 2]")
    assert data == {"a": {"b": {"c": [1, 2]}}}


def test_plus_equals_appends_to_a_list():
    data: dict = {"overrides": ["num_threads=1", "proposer.temperature=0.7"]}
    apply_override(data, "overrides+=[proposer.temperature=1.0, steps=5]")
    apply_override(data, "overrides+=seed=3")
    apply_override(data, "fresh.list+=[a]")
    assert data["overrides"] == [
        "num_threads=1",
        "proposer.temperature=0.7",
        "proposer.temperature=1.0",
        "steps=5",
        "seed=3",
    ]
    assert data["fresh"] == {"list": ["a"]}
    with pytest.raises(ConfigError, match="appends to a list"):
        apply_override({"steps": 3}, "steps+=1")


@dataclass
class Outer:
    inner: Top = field(default_factory=Top)


def test_validate_errors_are_qualified_once():
    from pasodoble.config import _qualify

    assert _qualify("solver", "lr") == "solver.lr"
    assert _qualify("solver", "solver.lr") == "solver.lr"
    assert _qualify("exp.rewards", "rewards.low") == "exp.rewards.low"
    with pytest.raises(ConfigError) as e:
        load_config(Outer, None, ["inner.solver.lr=0"])
    assert e.value.where == "inner.solver.lr"
