"""The tiny world's held-out tiers through `pasodoble eval`: its tokenizer, its Qwen3, one column per tier."""

import json

from pasodoble.cli import main


def test_world_tiers_evaluate_per_tier_with_flags_alone(tmp_path, capsys):
    from pasodoble.world import WorldConfig, build_world

    world = build_world(tmp_path / "world", WorldConfig.minimal())
    out = tmp_path / "run"
    args = ["eval", "--model", str(world.base_model_dir), "--dataset", str(world.tiers), "--group-field", "tier",
            "--id-field", "id", "--prompt-template", "{question}", "--max-new-tokens", "8", "--out", str(out),
            "--label", "base", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert "| Model | tiers/t1 | tiers/t2 | tiers/t3 | tiers/t4 | AVG |" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    assert rows[0]["prompt"].startswith("<|im_start|>user\nWhat is ") and rows[0]["id"] == "t1-0000"
    per_source = json.loads((out / "results.json").read_text())["per_source"]
    assert {s: int(r["n"]) for s, r in per_source.items()} == {f"tiers/t{i}": 4 for i in range(1, 5)}
