# Two entry points for a fresh clone: `make demo` (install + run the tiny-world demo) and `make test`.
# The CPU path pins torch to a CPU build (constraints.txt); see README for GPU installs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: install demo test test-all test-distributed lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -c constraints.txt "$(TORCH)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/pasodoble demo

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Everything, slow end-to-end runs included (not vllm/gpu/distributed, which need extra installs or hardware).
test-all: install
	$(BIN)/python -m pytest -q -m "not vllm and not gpu and not distributed" $(PYTEST_ARGS)

# Multi-process runs on CPU (gloo): collectives, 2- and 3-rank training, a killed rank, resume on another size.
test-distributed: install
	$(BIN)/python -m pytest -q -m distributed $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check pasodoble tests bench
	$(BIN)/ruff format --check pasodoble tests bench

format: install
	$(BIN)/ruff format pasodoble tests bench
	$(BIN)/ruff check --fix pasodoble tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
