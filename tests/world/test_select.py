"""The tiny world's SFT stop rule (`world/select.py`): dev questions, the check schedule, and the warm-up wiring."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pasodoble.errors import ConfigError
from pasodoble.io import read_jsonl
from pasodoble.sft import SFTConfig
from pasodoble.sft.next_tier import NextTierStop
from pasodoble.sft.tiny import cache_key, ensure_sft_models
from pasodoble.world import WorldConfig, problems
from pasodoble.world.select import SelectConfig, dev_questions


def test_dev_questions_are_training_side_distinct_and_skip_the_excluded():
    first = dev_questions("t3", 30, "dev/0", set())
    assert len({q for q, _ in first}) == 30
    assert not any(problems.is_held_out(q) for q, _ in first)  # never an evaluation problem
    excluded = {q for q, _ in first[:10]}
    second = dev_questions("t3", 30, "dev/0", excluded)
    assert len(second) == 30 and not excluded & {q for q, _ in second}


def _rule(config=None):
    """A stop rule without a model (only `met` is used)."""
    rule = object.__new__(NextTierStop)
    rule.config, rule.sft_tiers, rule.next_tier = config or SelectConfig(), ["t1", "t2"], "t3"
    return rule


def test_rule_needs_every_sft_tier_and_the_next_tier():
    probe = _rule()
    assert probe.met({"t1": 0.96, "t2": 0.95, "t3": 0.5})
    assert not probe.met({"t1": 0.96, "t2": 0.94, "t3": 0.9})  # t2 below its floor
    assert not probe.met({"t1": 1.0, "t2": 1.0, "t3": 0.48})  # t3 not yet within reach


def test_select_config_is_validated():
    with pytest.raises(ConfigError, match="next_tier_acc"):
        SelectConfig(next_tier_acc=1.5).validate()
    with pytest.raises(ConfigError, match="every"):
        WorldConfig(select=SelectConfig(every=-1)).validate()


def test_off_keeps_the_cache_key_of_worlds_built_before_the_rule():
    world, sft = WorldConfig(next_tier_share=0.14), SFTConfig(max_steps=800)
    assert cache_key(replace(world, select=SelectConfig(every=0)), sft) == "e6def2f44147e0d0"
    assert cache_key(world, sft) != "e6def2f44147e0d0"  # on (the default): a new start, a new entry


@pytest.fixture
def one_thread():
    """One torch thread for the warm-up (fast on a busy machine), restored afterwards for the other tests."""
    import torch

    before = torch.get_num_threads()
    yield 1
    torch.set_num_threads(before)


def _warm(tmp_path, select, threads):
    world = replace(WorldConfig.minimal(), select=replace(select, max_new_tokens=16))
    sft = SFTConfig(max_steps=6, batch_size=8, log_every=1, num_threads=threads)
    models = ensure_sft_models(tmp_path, world, sft, progress=False)
    return json.loads((models.solver_dir.parent / "select.json").read_text()), read_jsonl(models.sft_metrics)


def test_warm_up_stops_at_the_first_check_that_meets_the_rule(tmp_path, one_thread):
    report, rows = _warm(
        tmp_path,
        SelectConfig(every=2, start=2, dev_problems=3, min_sft_acc=0.0, next_tier_acc=0.0),
        one_thread,
    )
    assert report["stopped_at"] == 2 and report["steps_trained"] == 2
    assert max(r["step"] for r in rows if "both/sft/loss" in r) == 2  # no optimizer step after the stop
    assert [c["step"] for c in report["checks"]] == [2]
    assert any("sft_select/dev_t3" in r for r in rows)


def test_warm_up_runs_to_the_cap_and_says_so_when_the_rule_is_not_met(tmp_path, caplog, one_thread):
    report, rows = _warm(
        tmp_path,
        SelectConfig(every=2, start=2, dev_problems=3, min_sft_acc=1.0, next_tier_acc=1.0),
        one_thread,
    )
    assert report["stopped_at"] is None and report["steps_trained"] == 6
    assert [c["step"] for c in report["checks"]] == [2, 4, 6]
    assert max(r["step"] for r in rows if "both/sft/loss" in r) == 6
    assert "was not met in 6 steps" in caplog.text
