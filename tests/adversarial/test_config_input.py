"""Hostile and mistaken configs are refused at validation with one line naming the field (or file and line).

Each case ran before: a NaN learning rate, a negative warm-up or clip norm, micro_batch_size 10^9 all passed
validation; `yes`/`on` passed the strict-boolean check (YAML 1.1 reads them as true); a repeated key silently kept
the last value; an alias bomb expanded into the error message; 10^4 nested brackets raised a RecursionError.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from pasodoble.config import load_config, save_config, validate_tree
from pasodoble.errors import ConfigError
from pasodoble.roles.role import RoleConfig
from pasodoble.runs.train import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def _float_fields(cls: type, prefix: str = "") -> list[str]:
    """Dotted paths of every float field in a config tree (optional sections included)."""
    paths = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
        for arg in args:
            if dataclasses.is_dataclass(arg):
                paths += _float_fields(arg, f"{prefix}{f.name}.")
            elif arg is float:
                paths.append(f"{prefix}{f.name}")
    return paths


FLOAT_FIELDS = _float_fields(TrainConfig)


def test_the_tree_has_float_fields_in_many_sections():
    assert len(FLOAT_FIELDS) > 15 and {p.split(".")[0] for p in FLOAT_FIELDS} >= {
        "proposer",
        "solver",
        "rewards",
    }


@pytest.mark.parametrize("value", [".nan", "nan", ".inf", "-.inf", "1e400", "-Infinity"])
def test_non_finite_floats_are_refused_in_every_float_field(value):
    for path in FLOAT_FIELDS:
        with pytest.raises(ConfigError, match="must be a finite number") as err:
            load_config(TrainConfig, None, [f"{path}={value}"])
        assert err.value.where == path


def test_non_finite_floats_set_in_code_are_refused_by_validate_tree():
    with pytest.raises(ConfigError, match=r"solver\.lr: must be a finite number, got nan"):
        validate_tree(TrainConfig(solver=RoleConfig(lr=math.nan)))


@pytest.mark.parametrize(
    ("override", "where", "words"),
    [
        ("solver.warmup_steps=-1", "solver.warmup_steps", "must be >= 0"),
        ("proposer.max_grad_norm=-1.0", "proposer.max_grad_norm", "must be > 0"),
        ("proposer.max_grad_norm=0", "proposer.max_grad_norm", "would zero every gradient"),
        ("solver.epsilon_high=-0.1", "solver.epsilon_high", "must be > 0, or null"),
        ("solver.weight_decay=-0.01", "solver.weight_decay", "must be >= 0"),
        ("solver.num_generations=1000000", "solver.num_generations", "past the limit of 1024"),
        ("solver.max_completion_length=1000000000", "solver.max_completion_length", "context window"),
        ("solver.micro_batch_size=1000000000", "solver.micro_batch_size", "1 TiB"),
        ("proposer.generation_batch_size=1000000000", "proposer.generation_batch_size", "in one pass"),
    ],
)
def test_values_that_cannot_run_are_refused(override, where, words):
    with pytest.raises(ConfigError, match=words) as err:
        load_config(TrainConfig, None, [override])
    assert err.value.where == where


def test_null_switches_clipping_and_epsilon_high_off():
    cfg = load_config(TrainConfig, None, ["solver.max_grad_norm=null", "solver.epsilon_high=null"])
    assert cfg.solver.max_grad_norm is None and cfg.solver.epsilon_high is None


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "Yes", "ON"])
def test_booleans_are_true_or_false_only(tmp_path, word):
    with pytest.raises(ConfigError, match=f"logging.quiet: expected true or false, got '{word}'"):
        load_config(TrainConfig, None, [f"logging.quiet={word}"])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"solver:\n  gradient_checkpointing: {word}\n")
    with pytest.raises(
        ConfigError, match=f"solver.gradient_checkpointing: expected true or false, got '{word}'"
    ):
        load_config(TrainConfig, recipe)


def test_true_false_and_exponent_floats_still_read(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("solver:\n  lr: 1e-6\n  gradient_checkpointing: True\nlogging:\n  quiet: false\n")
    cfg = load_config(TrainConfig, recipe, ["proposer.lr=1e-5", "logging.tensorboard=true"])
    assert (cfg.solver.lr, cfg.proposer.lr) == (1e-6, 1e-5)
    assert cfg.solver.gradient_checkpointing is True and cfg.logging.tensorboard is True


def test_strings_that_look_like_other_types_survive_a_save(tmp_path):
    cfg = load_config(TrainConfig, None, ["run_dir='yes'", "cache_dir='1e-6'", "solver.model='2026-12-01'"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(TrainConfig, tmp_path / "config.yaml")
    assert (again.run_dir, again.cache_dir, again.solver.model) == ("yes", "1e-6", "2026-12-01")
    assert again == cfg


def test_a_duplicate_key_names_the_key_and_both_lines(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("solver:\n  lr: 1.0e-4\n  temperature: 1.0\n  lr: 1.0e-6\n")
    with pytest.raises(
        ConfigError, match=r"r.yaml:4: not valid YAML \(duplicate key 'lr' \(first at line 2\)\)"
    ):
        load_config(TrainConfig, recipe)
    recipe.write_text("solver:\n  lr: 1.0e-4\nsolver:\n  lr: 1.0e-6\n")
    with pytest.raises(ConfigError, match="r.yaml:3: .*duplicate key 'solver'"):
        load_config(TrainConfig, recipe)


def test_an_alias_bomb_is_refused_without_expanding(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 4)}]" for i in range(1, 11)]  # 4^10 leaves
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text("\n".join(lines) + "\nsolver:\n  lr: *a10\n")
    with pytest.raises(ConfigError, match=r"bomb.yaml:1: .*an anchor \(&a0\) is not allowed") as err:
        load_config(TrainConfig, recipe)
    assert len(str(err.value)) < 300
    with pytest.raises(ConfigError, match=r"an alias \(\*x\) is not allowed"):
        load_config(TrainConfig, None, ["solver.lr=*x"])


def test_huge_deep_or_undecodable_recipes_are_one_line_errors(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(
        ConfigError, match="too large: 2,097,155 bytes, and a recipe may hold at most 1,048,576"
    ):
        load_config(TrainConfig, recipe)
    recipe.write_text("x: " + "[" * 10_000 + "]" * 10_000 + "\n")
    with pytest.raises(ConfigError, match="nested deeper than 32 levels"):
        load_config(TrainConfig, recipe)
    recipe.write_bytes(b"solver:\n  model: caf\xe9\n")
    with pytest.raises(ConfigError, match="r.yaml: is not UTF-8 text"):
        load_config(TrainConfig, recipe)
    with pytest.raises(ConfigError, match="an integer of 400 digits is too large"):
        load_config(TrainConfig, None, ["seed=" + "9" * 400])


def test_train_cli_refuses_a_duplicate_key_in_one_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("schedule:\n  steps: 2\n  steps: 3\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pasodoble", "train", "--config", str(recipe)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"pasodoble train: error: {recipe}:3: not valid YAML (duplicate key 'steps' (first at line 2))"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_huge_value_is_cut_in_the_error_message(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("seed: [" + ", ".join(["lol"] * 100_000) + "]\n")
    with pytest.raises(ConfigError, match=r"seed: expected an integer, got \['lol', 'lol'.*\.\.\.$") as err:
        load_config(TrainConfig, recipe)
    assert len(str(err.value)) < 200
