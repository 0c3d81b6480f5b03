"""The tiny code world: every teacher proposal passes the code domain's parser and gate, every Solver example
answers what the program prints (the sandbox agrees), and `world.game: code` builds its files beside math's."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from pasodoble.domains import code_tasks as tasks
from pasodoble.domains import read_proposals
from pasodoble.domains.code import CodeDomain
from pasodoble.errors import ConfigError
from pasodoble.sandbox import probe
from pasodoble.sft import SFTConfig
from pasodoble.sft.tiny import cache_key
from pasodoble.world import code_world
from pasodoble.world.build import WorldConfig, build_world, manifest
from pasodoble.world.select import SelectConfig

CODE = replace(WorldConfig.minimal(), game="code")


def test_teacher_data_passes_the_parser_and_the_leak_test():
    rng = random.Random(0)
    for _ in range(300):
        program = code_world.sample_program(rng.choice(code_world.TIERS), rng)
        proposal = tasks.parse_task(code_world.proposer_completion(program))
        assert proposal.valid and json.loads(proposal.answer)["program"] == program.text
        assert tasks.syntax_reason(json.loads(proposal.answer)) is None
        assert tasks.output_leak(str(program.output), program.text, "") is None
        assert tasks.read_output(code_world.solver_completion(program)) == str(program.output)
    loop = code_world.sample_program("c3", random.Random(1))
    assert loop.lines[1].startswith("for i in range(") and len(loop.trace) >= 2


def test_game_code_builds_the_code_world(tmp_path):
    paths = build_world(tmp_path, CODE)
    rows = [json.loads(line) for line in paths.sft_proposer.read_text().splitlines()]
    assert all(r["prompt"].endswith("\nWrite a task.") for r in rows)
    assert all(tasks.parse_task(r["completion"]).valid for r in rows)
    tiers = [json.loads(line) for line in paths.tiers.read_text().splitlines()]
    assert {t["tier"] for t in tiers} == set(code_world.TIERS)
    assert json.loads(tiers[0]["answer"])["kind"] == "output"
    assert json.loads((tmp_path / "world.json").read_text()) == manifest(CODE)
    with pytest.raises(ConfigError, match="world.game"):
        replace(CODE, game="chess").validate()
    with pytest.raises(ConfigError, match="world.select.every"):
        replace(CODE, select=SelectConfig()).validate()


def test_math_keys_and_manifests_leave_the_game_out():
    assert "game" not in manifest(WorldConfig())["config"]
    assert cache_key(CODE, SFTConfig()) != cache_key(replace(CODE, game="math"), SFTConfig())


@pytest.mark.sandbox
@pytest.mark.skipif(not probe()["essential_ok"], reason="no sandbox on this machine (make sandbox-env)")
def test_the_sandbox_computes_the_teachers_outputs():
    rng = random.Random(2)
    programs = [code_world.sample_program(tier, rng) for tier in code_world.TIERS]
    domain = CodeDomain()
    proposals = read_proposals(domain, [code_world.proposer_completion(p) for p in programs])
    assert [p.invalid_reason for p in proposals] == [None, None, None]
    assert [domain.gold(p.answer)["stdout"] for p in proposals] == [str(p.output) for p in programs]
