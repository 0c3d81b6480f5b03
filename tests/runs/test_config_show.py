"""`pasodoble config show` / `keys`: the resolved config as commented YAML, every key with its source comment."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from pasodoble.cli import main
from pasodoble.config import load_config
from pasodoble.runs.config_show import commented_yaml, config_kinds, field_comments, flat_keys


@dataclass
class _Inner:
    # the comment block above a field
    # spans two lines
    a: int = 1
    b: str = "x\ny"  # a string with a newline


@dataclass
class _Outer:
    inner: _Inner = field(default_factory=_Inner)  # a statement over three lines, comment at its end
    off: _Inner | None = None  # a section that is off by default
    names: list[str] = field(default_factory=lambda: ["p", "q"])  # a list
    plain: float = 0.5


def test_comments_come_from_the_source_inline_multiline_and_above():
    assert field_comments(_Inner) == {
        "a": "the comment block above a field spans two lines",
        "b": "a string with a newline",
    }
    outer = field_comments(_Outer)
    assert outer["inner"] == "a statement over three lines, comment at its end"
    assert "plain" not in outer


def test_flat_keys_list_sections_that_are_off_and_their_keys():
    keys = {k: (d, c) for k, d, c in flat_keys(_Outer)}
    assert keys["off"] == ("null", "a section that is off by default")
    assert keys["off.a"][0] == "1" and keys["inner.b"] == ('"x\\ny"', "a string with a newline")
    assert keys["names"][0] == "[p, q]"


@pytest.mark.parametrize("kind", ["train", "experiment", "demo"])
def test_every_key_of_every_recipe_kind_has_a_comment(kind):
    missing = [k for k, _, comment in flat_keys(config_kinds()[kind]) if not comment]
    assert not missing, f"fields without a '# ...' comment in their dataclass: {missing}"


@pytest.mark.parametrize(
    ("kind", "recipe", "overrides"),
    [
        ("train", "recipes/tiny-online.yaml", ["schedule.steps=3", "eval.problems_file=tiny:tiers"]),
        ("train", "recipes/qwen3-1.7b-offline.yaml", []),
        ("experiment", "recipes/tiny-ablation-copy-1m-wide.yaml", ["seeds=[0]"]),
        ("demo", "recipes/demo.yaml", []),
    ],
)
def test_show_prints_yaml_that_reads_back_to_the_same_config(kind, recipe, overrides, tmp_path, capsys):
    assert main(["config", "show", recipe, *overrides]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"# pasodoble {kind} config: {recipe}")
    shown = tmp_path / "shown.yaml"
    shown.write_text(text, encoding="utf-8")
    cls = config_kinds()[kind]
    assert load_config(cls, shown) == load_config(cls, recipe, overrides)


def test_show_comments_each_line_and_keys_list_defaults(capsys):
    lines = commented_yaml(config_kinds()["train"]())
    assert "  lr: 1.0e-06  # AdamW learning rate" in lines
    assert any(line.startswith("eval: null  # ") for line in lines)
    assert main(["config", "keys"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("solver.lr ") and "AdamW learning rate" in line for line in out.splitlines())
    n_fields = sum(1 for f in dataclasses.fields(config_kinds()["train"]))
    assert len(out.splitlines()) > n_fields


def test_show_without_recipe_takes_overrides_and_bad_input_is_one_line(tmp_path, capsys):
    assert main(["config", "show", "seed=3"]) == 0
    assert "\nseed: 3  # " in capsys.readouterr().out
    odd = tmp_path / "odd.yaml"
    odd.write_text("nonsense: 1\n", encoding="utf-8")
    assert main(["config", "show", str(odd)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kind" in err[0]
    assert main(["config", "show", "recipes/tiny-online.yaml", "solver.lrr=1"]) == 2
    assert "did you mean 'lr'" in capsys.readouterr().err
