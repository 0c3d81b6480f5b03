"""`pasodoble layout --config RECIPE --processes N`: check a recipe's multi-GPU layout before a launch.

It resolves the recipe the way `pasodoble train` does on N processes (over --nodes, with this machine's GPUs
unless --visible-gpus / --gpu-memory-gb say otherwise), prints the memory table of `layout.check_layout` and the
resolved layout line, and fails with the one-line error `train` would give. The checks live in `layout.py`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pasodoble.config import load_config
from pasodoble.runs.train_config import TrainConfig


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "layout", help="check a recipe's multi-GPU layout and print its memory estimate"
    )
    p.add_argument("--config", type=Path, required=True, help="YAML recipe")
    p.add_argument("--processes", type=int, default=1, help="training processes (world size) to check")
    p.add_argument("--nodes", type=int, default=1, help="nodes the processes are spread over")
    p.add_argument("--visible-gpus", type=int, default=None, help="GPUs per node (default: this machine's)")
    p.add_argument(
        "--gpu-memory-gb", type=float, default=None, help="memory of one GPU (default: this machine's)"
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    p.set_defaults(func=run_layout_cmd)


def run_layout_cmd(args: argparse.Namespace) -> int:
    cfg = load_config(TrainConfig, args.config, args.overrides)
    # torch loads here (the layout reads this machine's GPUs), after the recipe is checked
    from pasodoble.scale.layout import Launch, check_layout, describe, launch_from_env, model_architectures

    here = launch_from_env(args.processes)
    launch = Launch(
        world_size=args.processes,
        local_world_size=-(-args.processes // args.nodes),
        visible_gpus=here.visible_gpus if args.visible_gpus is None else args.visible_gpus,
        gpu_memory_gb=args.gpu_memory_gb if args.gpu_memory_gb is not None else here.gpu_memory_gb,
    )
    resolved = check_layout(cfg, launch, model_architectures(cfg), show=lambda lines: print("\n".join(lines)))
    print(describe(resolved))
    return 0
