"""SFT: completion-only labels, the same prompt ids generation uses, a falling loss, a loadable checkpoint, the CLI."""

from __future__ import annotations

import argparse
import json
import math
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.errors import ConfigError, UserError
from pasodoble.io import read_jsonl
from pasodoble.sft import SFTConfig, batch_order, collate, encode_examples, lr_at, train_sft
from pasodoble.sft.cli import register
from pasodoble.sft.trainer import collate_packed, pack_rows, split_examples
from pasodoble.world import WorldConfig, build_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"), WorldConfig.minimal())


def test_collate_masks_prompt_and_padding():
    batch = collate([[5, 6, 7, 8], [5, 9]], [2, 1], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    assert batch["labels"].tolist() == [[-100, -100, 7, 8], [-100, 9, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]


def test_prompt_ids_match_generation_prompt_and_end_in_eos(world):
    tok = AutoTokenizer.from_pretrained(world.tokenizer_dir)
    example = read_jsonl(world.sft_proposer)[0]
    (ids,), (plen,), truncated = encode_examples(tok, [example], max_length=256)
    chat = tok.apply_chat_template(
        [{"role": "user", "content": example["prompt"]}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    assert ids[:plen] == chat and truncated == 0
    assert ids[-1] == tok.eos_token_id
    assert tok.decode(ids[plen:-1]) == example["completion"]
    (short,), _, truncated = encode_examples(tok, [example], max_length=10)
    assert len(short) == 10 and truncated == 1


def test_batch_order_covers_each_example_once():
    lengths = [random.Random(i).randint(5, 50) for i in range(1000)]
    plain = batch_order(lengths, 64, random.Random(0))
    assert sorted(i for b in plain for i in b) == list(range(1000))
    batches = batch_order(lengths, 64, random.Random(0), group=True)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 10  # sorted within a window: little padding


def test_lr_schedule():
    config = SFTConfig(max_steps=100, warmup_steps=10, lr=1.0)
    assert lr_at(0, config) == pytest.approx(0.1)
    assert lr_at(9, config) == pytest.approx(1.0)
    assert lr_at(99, config) == pytest.approx(0.1, abs=0.01)


class Rows:
    def __init__(self):
        self.rows = []

    def log(self, metrics, step):
        self.rows.append({"step": step, **metrics})


def test_sft_lowers_loss_and_saves_a_loadable_checkpoint(world, tmp_path):
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(world.tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(world.base_model_dir)
    before = [p.detach().clone() for p in model.parameters()]
    tracker = Rows()
    config = SFTConfig(max_steps=40, batch_size=16, warmup_steps=5, log_every=5, num_threads=None)
    summary = train_sft(
        model, tok, read_jsonl(world.sft_solver), config, tracker=tracker, progress=False, role="solver"
    )
    assert summary["solver/sft/loss_last"] < 0.7 * summary["solver/sft/loss_first"]
    assert [r["step"] for r in tracker.rows] == list(range(5, 41, 5))
    assert all(
        set(r) == {"step", "solver/sft/loss", "solver/sft/lr", "solver/sft/tokens_per_s"}
        for r in tracker.rows
    )
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    ids = torch.tensor([tok("What is 1 + 2?")["input_ids"]])
    assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-5)


def test_config_and_data_errors(world):
    with pytest.raises(ConfigError, match="roles"):
        SFTConfig(roles="both").validate()
    tok = AutoTokenizer.from_pretrained(world.tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(world.base_model_dir)
    with pytest.raises(UserError, match="empty"):
        train_sft(model, tok, [], SFTConfig(max_steps=1), progress=False)


def _cli(argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_trains_and_reports_bad_rows(world, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [
        "sft",
        "--model",
        str(world.base_model_dir),
        "--data",
        str(world.sft_solver),
        "--out",
        str(out),
        "--max-steps",
        "3",
        "--batch-size",
        "8",
        "--no-progress",
    ]
    assert _cli(argv) == 0
    printed = capsys.readouterr().out
    assert f"-> {out} (metrics.jsonl, then the model)" in printed  # the output folder, at the start
    assert f"wrote {out} (a Hugging Face model folder" in printed and f"solver.model={out}" in printed
    assert AutoModelForCausalLM.from_pretrained(out) is not None
    assert len(read_jsonl(out / "metrics.jsonl")) == 1  # log_every=10 > 3 steps: the last step is logged
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x"}) + "\n{oops\n")
    with pytest.raises(UserError, match=r"bad.jsonl: no usable example \(2 bad line\(s\)\)"):
        _cli([*argv[:4], str(bad), *argv[5:]])


def test_bad_sft_lines_are_reported_and_skipped(tmp_path, capsys):
    from pasodoble.sft import load_examples

    data = tmp_path / "data.jsonl"
    good = json.dumps({"prompt": "x", "completion": "y"}).encode()
    data.write_bytes(
        b"\n".join([good, b'{"prompt": "x"}', b'{"prompt": "\xff", "completion": "y"}', good]) + b"\n"
    )
    assert load_examples(data) == [{"prompt": "x", "completion": "y"}] * 2
    err = capsys.readouterr().err
    assert "data.jsonl:2: each row needs string fields 'prompt' and 'completion'; line skipped" in err
    assert "data.jsonl:3: not UTF-8 (byte 0xff" in err and "2 bad line(s) skipped, 2 examples read" in err


def _tiny_batch_model(world):
    torch.manual_seed(0)
    return AutoTokenizer.from_pretrained(world.tokenizer_dir), AutoModelForCausalLM.from_pretrained(
        world.base_model_dir
    )


def test_micro_batches_accumulate_to_the_full_batch_step(world):
    examples = read_jsonl(world.sft_proposer)[:8] + read_jsonl(world.sft_solver)[:8]
    results = []
    for micro in (None, 3):
        tok, model = _tiny_batch_model(world)
        config = SFTConfig(
            max_steps=2, batch_size=16, warmup_steps=1, num_threads=None, micro_batch_size=micro
        )
        summary = train_sft(model, tok, examples, config, progress=False)
        results.append((summary["model/sft/loss_last"], [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)  # the token mean over the whole batch
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.allclose(a, b, atol=1e-5)


def test_bf16_autocast_keeps_fp32_master_weights_and_checkpointing_trains(world):
    examples = read_jsonl(world.sft_solver)[:32]
    tok, model = _tiny_batch_model(world)
    before = [p.detach().clone() for p in model.parameters()]
    config = SFTConfig(
        max_steps=3, batch_size=8, warmup_steps=1, num_threads=None, bf16=True, gradient_checkpointing=True
    )
    summary = train_sft(model, tok, examples, config, progress=False)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the optimizer updated fp32 weights
    assert math.isfinite(summary["model/sft/loss_last"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert model.is_activation_checkpointing


def test_eval_split_and_eval_loss(world):
    examples = read_jsonl(world.sft_solver)
    train, held = split_examples(examples, 0.1, seed=0)
    assert len(held) == 20 and len(train) == 180
    assert sorted(map(json.dumps, train + held)) == sorted(map(json.dumps, examples))  # a partition
    assert split_examples(examples, 0.1, seed=0) == (train, held)
    assert split_examples(examples, 0.0, seed=0) == (examples, [])
    tok, model = _tiny_batch_model(world)
    rows = Rows()
    config = SFTConfig(
        max_steps=30, batch_size=16, warmup_steps=3, num_threads=None, eval_every=10, log_every=10
    )
    summary = train_sft(model, tok, train, config, eval_examples=held, tracker=rows, progress=False)
    evals = [(r["step"], r["model/sft/eval_loss"]) for r in rows.rows if "model/sft/eval_loss" in r]
    assert [s for s, _ in evals] == [0, 10, 20, 30]
    assert summary["model/sft/eval_loss_last"] < summary["model/sft/eval_loss_first"]


def test_system_messages_go_through_the_chat_template(world):
    tok = AutoTokenizer.from_pretrained(world.tokenizer_dir)
    example = {"prompt": "1 + 2", "completion": "\\boxed{3}", "system": "Be brief."}
    (ids,), (plen,), _ = encode_examples(tok, [example], max_length=256)
    chat = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 2"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    assert ids[:plen] == chat


def test_cli_recipe_with_flags_writes_a_checkpoint_train_accepts(world, tmp_path):
    from pasodoble.roles.role import Role, RoleConfig

    recipe = tmp_path / "sft.yaml"
    recipe.write_text(
        f"model: {world.base_model_dir}\ndata: {world.sft_solver}\nout: {tmp_path / 'ignored'}\n"
        "eval_fraction: 0.1\nsft:\n  max_steps: 50\n  batch_size: 8\n  log_every: 5\n  micro_batch_size: 4\n"
    )
    out = tmp_path / "out"
    assert _cli(["sft", "--config", str(recipe), "--out", str(out), "--max-steps", "4", "--no-progress"]) == 0
    saved = (out / "config.yaml").read_text()
    assert "max_steps: 4" in saved and "micro_batch_size: 4" in saved and str(out) in saved
    rows = read_jsonl(out / "metrics.jsonl")
    assert any("model/sft/eval_loss" in r for r in rows)
    role = Role.from_pretrained("solver", RoleConfig(model=str(out)), out)
    assert role.model.config.use_cache


def test_new_sft_fields_at_their_defaults_keep_the_tiny_cache_key():
    from pasodoble.sft.tiny import cache_key
    from pasodoble.world.select import SelectConfig

    # the key of the default tiny models before micro_batch_size / eval_every / bf16 / gradient_checkpointing
    # existed: caches built then must stay valid
    # (that start is today's world with the stop rule off, 14% t3 and 800 steps)
    old_start = WorldConfig(next_tier_share=0.14, select=SelectConfig(every=0))
    assert cache_key(old_start, SFTConfig(max_steps=800)) == "e6def2f44147e0d0"
    assert cache_key(WorldConfig(), SFTConfig(bf16=True)) != "e6def2f44147e0d0"


def test_pack_rows_fills_rows_without_overflow():
    lengths = [random.Random(i).randint(5, 60) for i in range(50)]
    rows = pack_rows(lengths, 100)
    assert sorted(i for row in rows for i in row) == list(range(50))
    assert all(sum(lengths[i] for i in row) <= 100 for row in rows)
    assert len(rows) < 50  # more than one example per row on average


def test_packed_rows_keep_examples_apart():
    batch = collate_packed([[5, 6, 7], [8, 9], [4, 4, 4, 4]], [1, 1, 2], pad_id=0, capacity=6)
    assert batch["input_ids"].tolist() == [[8, 9, 4, 4, 4, 4], [5, 6, 7, 0, 0, 0]]  # first fit, longest first
    assert batch["position_ids"].tolist() == [[0, 1, 0, 1, 2, 3], [0, 1, 2, 0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 9, -100, -100, 4, 4], [-100, 6, 7, -100, -100, -100]]
    mask = batch["attention_mask"][:, 0]  # (R, W, W)
    assert not mask[0, 2:, :2].any() and mask[0, 5, 2:].all()  # the second example sees only itself
    assert mask[1, 4].tolist() == [False, False, False, False, True, False]  # padding sees itself alone


def test_packing_gives_the_unpacked_step(world):
    examples = read_jsonl(world.sft_proposer)[:6] + read_jsonl(world.sft_solver)[:10]
    results = []
    for packing in (False, True):
        tok, model = _tiny_batch_model(world)
        config = SFTConfig(max_steps=2, batch_size=16, warmup_steps=1, num_threads=None, packing=packing)
        summary = train_sft(model, tok, examples, config, progress=False)
        results.append((summary["model/sft/loss_last"], [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-4)
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.distributed
def test_two_processes_train_the_same_weights_as_one(world, tmp_path):
    """`torchrun --nproc_per_node 2 -m pasodoble sft` (Accelerate, gloo on CPU): each process runs half of every
    batch, and the result equals the one-process run's: same losses, same weights."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    args = ["-m", "pasodoble", "sft", "--model", str(world.base_model_dir), "--data", str(world.sft_solver)]
    args += [
        "--max-steps",
        "3",
        "--batch-size",
        "8",
        "--no-progress",
        "eval_fraction=0.1",
        "sft.micro_batch_size=2",
    ]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    for cmd, out in (([sys.executable], "one"), (torchrun, "two")):
        done = subprocess.run(
            [*cmd, *args, "--out", str(tmp_path / out)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
    one, two = (
        load_file(tmp_path / "one" / "model.safetensors"),
        load_file(tmp_path / "two" / "model.safetensors"),
    )
    assert max((one[k] - two[k]).abs().max().item() for k in one) < 1e-5
    rows = [read_jsonl(tmp_path / name / "metrics.jsonl") for name in ("one", "two")]
    assert len(rows[0]) == len(rows[1])  # the second process wrote no rows of its own
    for a, b in zip(*rows):
        for key in ("model/sft/loss", "model/sft/eval_loss"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-5)
