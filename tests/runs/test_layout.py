"""Layout validation: impossible layouts fail with one line naming the numbers, before any model loads."""

from __future__ import annotations

import json

import pytest

from pasodoble.cli import main
from pasodoble.config import load_config
from pasodoble.runs.train import TrainConfig
from pasodoble.scale.layout import (
    Launch,
    LayoutError,
    check_layout,
    describe,
    memory_table,
    model_architectures,
    parameter_count,
)

# Qwen3-4B(-Base)'s config.json numbers (the architecture only; no weights).
QWEN3_4B = {
    "model_type": "qwen3",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
QWEN2_5 = {"model_type": "qwen2", "vocab_size": 151936, "tie_word_embeddings": True}
ARCHS = {  # config.json numbers of the paper's base models (architecture only)
    "Qwen/Qwen2.5-0.5B": {
        **QWEN2_5,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
    "Qwen/Qwen2.5-1.5B": {
        **QWEN2_5,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
    "Qwen/Qwen2.5-3B": {
        **QWEN2_5,
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
    },
    "Qwen/Qwen3-0.6B-Base": {
        **QWEN3_4B,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
    },
    "Qwen/Qwen3-4B-Base": QWEN3_4B,
}
QWEN3_1_7B = {
    **QWEN3_4B,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
}


ARCHS["Qwen/Qwen3-1.7B-Base"] = QWEN3_1_7B
PUBLISHED_B = {  # parameters in billions, as the model cards give them
    "Qwen/Qwen2.5-0.5B": 0.49,
    "Qwen/Qwen2.5-1.5B": 1.54,
    "Qwen/Qwen2.5-3B": 3.09,
    "Qwen/Qwen3-0.6B-Base": 0.6,
    "Qwen/Qwen3-1.7B-Base": 1.7,
    "Qwen/Qwen3-4B-Base": 4.0,
}


def model_dir(tmp_path, name, arch):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(arch))
    return str(folder)


def config(tmp_path, arch, *overrides):
    folder = model_dir(tmp_path, "m", arch)
    return load_config(
        TrainConfig,
        "recipes/qwen3-1.7b-online.yaml",
        [f"proposer.model={folder}", f"solver.model={folder}", *overrides],
    )


@pytest.mark.parametrize("model", sorted(PUBLISHED_B))
def test_parameter_count_matches_the_published_sizes(model):
    assert parameter_count(ARCHS[model]) / 1e9 == pytest.approx(PUBLISHED_B[model], rel=0.03)


def test_eight_gpus_asked_with_two_visible(tmp_path):
    cfg = config(tmp_path, QWEN3_1_7B, "distributed.gpus=8")
    with pytest.raises(LayoutError, match=r"^layout: 8 GPUs asked for \(distributed.gpus\) but 2 visible"):
        check_layout(
            cfg,
            Launch(world_size=2, local_world_size=2, visible_gpus=2, gpu_memory_gb=80),
            model_architectures(cfg),
        )


def test_more_processes_than_training_gpus(tmp_path):
    cfg = config(tmp_path, QWEN3_1_7B, "distributed.vllm_gpus=2")
    with pytest.raises(
        LayoutError, match=r"6 training processes on this node but 4 training GPUs \(6 visible - 2"
    ):
        check_layout(
            cfg,
            Launch(world_size=6, local_world_size=6, visible_gpus=6, gpu_memory_gb=80),
            model_architectures(cfg),
        )


def test_tensor_parallel_three_on_sixteen_heads(tmp_path):
    cfg = config(tmp_path, QWEN3_1_7B, "distributed.tensor_parallel_size=3", "distributed.vllm_gpus=3")
    with pytest.raises(
        LayoutError, match=r"tensor_parallel_size 3 does not divide the proposer's 16 attention heads"
    ):
        check_layout(cfg, Launch(world_size=1, visible_gpus=4, gpu_memory_gb=80), model_architectures(cfg))


def test_4b_full_fine_tuning_without_offload_does_not_fit_24gb(tmp_path):
    cfg = config(tmp_path, QWEN3_4B)
    with pytest.raises(
        LayoutError, match=r"^layout: needs about [0-9.]+ GB per GPU .* but a GPU has 24 GB"
    ) as e:
        check_layout(cfg, Launch(world_size=1, visible_gpus=1, gpu_memory_gb=24), model_architectures(cfg))
    assert "\n" not in str(e.value)


def test_sharding_and_offload_shrink_the_estimate(tmp_path):
    totals = {}
    for label, overrides in [
        ("ddp", []),
        ("fsdp2", ["distributed.backend=fsdp2"]),
        ("zero2_offload", ["distributed.backend=deepspeed", "distributed.offload_optimizer=true"]),
    ]:
        (tmp_path / label).mkdir()
        cfg = config(tmp_path / label, QWEN3_4B, *overrides)
        lines, overflow = memory_table(cfg, Launch(world_size=8, visible_gpus=8), model_architectures(cfg))
        assert overflow is None  # no GPU size known: nothing to compare against
        totals[label] = float(lines[-1].split()[1])
    assert totals["zero2_offload"] < totals["ddp"] and totals["fsdp2"] < totals["ddp"]


def test_a_token_budget_sizes_the_activation_estimate(tmp_path):
    totals = {}
    for label, budget in [("sequences", None), ("small", 8192), ("large", 10**6)]:
        (tmp_path / label).mkdir()
        overrides = [f"{r}.micro_batch_size=4" for r in ("proposer", "solver")]  # 4 x 7,424 tokens at most
        overrides += (
            [] if budget is None else [f"{r}.micro_batch_tokens={budget}" for r in ("proposer", "solver")]
        )
        cfg = config(tmp_path / label, QWEN3_4B, *overrides)
        lines, _ = memory_table(cfg, Launch(world_size=1, visible_gpus=1), model_architectures(cfg))
        totals[label] = float(lines[-1].split()[1])
    assert totals["small"] < totals["sequences"] < totals["large"]


def test_the_table_shows_auto_checkpointing_chosen_by_the_gpu_s_memory(tmp_path):
    """`gradient_checkpointing: auto` is on where the update's activations would not fit the GPU, and the activation
    column follows the choice; `true` and `false` are shown as given."""
    overrides = ["proposer.gradient_checkpointing=auto", "solver.gradient_checkpointing=false"]
    cfg = config(tmp_path, QWEN3_1_7B, *overrides, "proposer.micro_batch_size=2")
    rows = {}
    for gb in (80, 400):
        lines, _ = memory_table(
            cfg, Launch(world_size=1, visible_gpus=1, gpu_memory_gb=gb), model_architectures(cfg)
        )
        rows[gb] = next(line for line in lines if line.startswith("gradient checkpointing"))
        rows[gb, "activations"] = float(
            next(line for line in lines if line.startswith("proposer")).split()[4]
        )
    assert rows[80] == "gradient checkpointing: proposer on (auto), solver off"
    assert rows[400] == "gradient checkpointing: proposer off (auto), solver off"
    assert rows[80, "activations"] < rows[400, "activations"]


def test_deepspeed_and_fsdp2_run_on_cpu(tmp_path):
    launch = Launch(world_size=2, local_world_size=2, visible_gpus=0)
    (tmp_path / "ds").mkdir()
    cfg = config(tmp_path / "ds", QWEN3_1_7B, "distributed.backend=deepspeed")  # DeepSpeed's CPU accelerator
    assert check_layout(cfg, launch, model_architectures(cfg)).backend == "deepspeed"
    cfg = config(tmp_path, QWEN3_1_7B, "distributed.backend=fsdp2")  # torch's fully_shard over gloo
    assert check_layout(cfg, launch, model_architectures(cfg)).backend == "fsdp2"


def test_fsdp2_counts_the_gathered_weights_and_shards_the_optimizer(tmp_path):
    cfg = config(tmp_path, QWEN3_4B, "distributed.backend=fsdp2")
    lines, _ = memory_table(cfg, Launch(world_size=8, visible_gpus=8), model_architectures(cfg))
    weights, grads, optimizer = (float(x) for x in lines[1].split()[1:4])
    n_gb = parameter_count(QWEN3_4B) * 2 / 1e9  # bf16
    assert weights == pytest.approx(n_gb * (1 + 1 / 8), abs=0.01)  # the shard + the copy gathered per phase
    assert grads == pytest.approx(n_gb, abs=0.01)  # accumulated unsharded until the one reduce-scatter
    assert optimizer == pytest.approx(parameter_count(QWEN3_4B) * 12 / 8 / 1e9, abs=0.01)


def test_zero3_counts_the_gathered_weights_and_shards_gradients_and_optimizer(tmp_path):
    cfg = config(tmp_path, QWEN3_4B, "distributed.backend=deepspeed", "distributed.zero_stage=3")
    lines, _ = memory_table(cfg, Launch(world_size=8, visible_gpus=8), model_architectures(cfg))
    weights, grads, optimizer = (float(x) for x in lines[1].split()[1:4])
    n_gb = parameter_count(QWEN3_4B) * 2 / 1e9  # bf16
    assert weights == pytest.approx(n_gb * (1 + 1 / 8), abs=0.01)  # the shard + the copy gathered per phase
    assert grads == pytest.approx(n_gb / 8, abs=0.01)
    assert optimizer == pytest.approx(parameter_count(QWEN3_4B) * 12 / 8 / 1e9, abs=0.01)


def dedicated(cfg, *roles):
    """`cfg` with a dedicated placement and `roles` on vLLM servers (set after loading: the config check would
    ask for an importable vllm, which the default test environment does not have)."""
    cfg.distributed.rollout = "dedicated"
    for name in roles:
        getattr(cfg, name).engine = "vllm_server"
    return cfg


def test_a_good_layout_resolves_ragged_shares_and_the_servers_gpus(tmp_path):
    cfg = config(tmp_path, QWEN3_1_7B, "distributed.gpus=6", "distributed.vllm_gpus=2")
    resolved = check_layout(
        dedicated(cfg, "proposer", "solver"),
        Launch(world_size=4, local_world_size=4, visible_gpus=6, gpu_memory_gb=80),
        model_architectures(cfg),
    )
    assert (resolved.world_size, resolved.backend) == (4, "ddp")
    assert resolved.proposer_shares == [2, 2, 1, 1] and sum(resolved.solver_shares) == 36
    assert resolved.rollout == "dedicated"
    assert resolved.vllm_servers == {"proposer": [4], "solver": [5]}  # the paper's 2 vLLM + N training GPUs
    assert "proposer on GPU 4, solver on GPU 5" in describe(resolved)


def test_dedicated_servers_with_tensor_parallelism_take_consecutive_gpus(tmp_path):
    cfg = dedicated(config(tmp_path, QWEN3_1_7B, "distributed.vllm_gpus=4"), "proposer", "solver")
    cfg.proposer.vllm.tensor_parallel_size = cfg.solver.vllm.tensor_parallel_size = 2
    resolved = check_layout(
        cfg, Launch(world_size=4, local_world_size=4, visible_gpus=8), model_architectures(cfg)
    )
    assert resolved.vllm_servers == {"proposer": [4, 5], "solver": [6, 7]}
    cfg.distributed.vllm_gpus = 3
    with pytest.raises(
        LayoutError,
        match=r"^layout: the dedicated vLLM servers need 4 GPUs \(proposer 2, solver 2\) but distributed.vllm_gpus is 3",
    ):
        check_layout(cfg, Launch(world_size=4, local_world_size=4, visible_gpus=8), model_architectures(cfg))


def test_impossible_placements_fail_with_one_line(tmp_path):
    launch = Launch(world_size=2, local_world_size=2, visible_gpus=4)
    cfg = config(tmp_path, QWEN3_1_7B, "distributed.vllm_gpus=2")
    with pytest.raises(
        LayoutError, match=r"vllm_gpus=2 sets GPUs aside .* but distributed.rollout is colocated"
    ):
        check_layout(cfg, launch, model_architectures(cfg))
    cfg = dedicated(cfg)
    with pytest.raises(
        LayoutError, match=r"no role has engine vllm_server; set proposer.engine=vllm_server and"
    ):
        check_layout(cfg, launch, model_architectures(cfg))
    cfg = dedicated(cfg, "solver")
    cfg.distributed.vllm_gpus = 0
    with pytest.raises(
        LayoutError, match=r"needs GPUs for the solver vLLM server\(s\); set distributed.vllm_gpus"
    ):
        check_layout(cfg, launch, model_architectures(cfg))
    cfg.distributed.vllm_gpus, cfg.distributed.tensor_parallel_size = 2, 2
    with pytest.raises(
        LayoutError, match=r"distributed.tensor_parallel_size is 2 but the solver's server starts with"
    ):
        check_layout(cfg, launch, model_architectures(cfg))


def test_dedicated_servers_on_a_cpu_machine_share_its_cores(tmp_path):
    cfg = dedicated(config(tmp_path, QWEN3_1_7B), "solver")
    resolved = check_layout(
        cfg, Launch(world_size=2, local_world_size=2, visible_gpus=0), model_architectures(cfg)
    )
    assert resolved.vllm_servers == {"solver": []}
    assert "solver on the CPU" in describe(resolved)


def test_layout_command_prints_the_table_and_exits_2_on_a_bad_layout(tmp_path, capsys):
    folder = model_dir(tmp_path, "m4b", QWEN3_4B)
    args = ["layout", "--config", "recipes/qwen3-1.7b-online.yaml"]
    models = [f"proposer.model={folder}", f"solver.model={folder}"]
    assert main([*args, "--visible-gpus", "1", "--gpu-memory-gb", "24", *models]) == 2
    captured = capsys.readouterr()
    assert "optimizer" in captured.out and "proposer" in captured.out
    assert captured.err.count("\n") == 1 and "but a GPU has 24 GB" in captured.err
    flags = ["--processes", "8", "--visible-gpus", "8", "--gpu-memory-gb", "80"]
    assert main([*args, *flags, *models, "distributed.backend=fsdp2"]) == 0
    assert "backend fsdp2" in capsys.readouterr().out
