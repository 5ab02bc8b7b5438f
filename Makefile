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
HAREL_STACK := $(BIN)/harel-stack

.DEFAULT_GOAL := help
.PHONY: help venv up down status logs smoke demo test mutate chaos lint bench backup restore

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Each job installs what it needs into one .venv, in layers: `make demo` the SDK alone; `make up` & co. the
# stack CLI on top; `make test`, `make lint` and `make bench` the test and infra tools on top of both.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(SDK_STAMP): sdk/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e sdk
	touch $@

$(STACK_STAMP): $(SDK_STAMP) stack/pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e stack
	touch $@

$(STAMP): $(STACK_STAMP) sdk/pyproject.toml tests/requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet -e 'sdk[test]' -r tests/requirements.txt
	touch $@

# The real mongosh for the tests, at the version pinned in tests/tools/package-lock.json (needs Node.js and npm).
# Install scripts are skipped: they only build optional native add-ons mongosh runs without.
$(MONGOSH_STAMP): $(TOOLS)/package.json $(TOOLS)/package-lock.json
	cd $(TOOLS) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	$(TOOLS)/node_modules/.bin/mongosh --version
	touch $@

venv: $(STAMP) $(MONGOSH_STAMP) ## create .venv with the SDK, the stack CLI and the test tools (mongosh included)

up: $(STACK_STAMP) ## start the local stack in Docker (needs a Docker engine) and wait until it is ready
	$(HAREL_STACK) up

down: $(STACK_STAMP) ## stop the local stack (VOLUMES=1 also deletes its data)
	$(HAREL_STACK) down $(if $(VOLUMES),--volumes,)

status: $(STACK_STAMP) ## services, replica-set members, workers and executions of the local stack
	$(HAREL_STACK) status

logs: $(STACK_STAMP) ## follow the logs of the local stack (SERVICE=worker for one service)
	$(HAREL_STACK) logs $(SERVICE)

smoke: $(STACK_STAMP) ## run the fork/join + durable-timer smoke workflow against the local stack
	$(HAREL_STACK) smoke

backup: $(STACK_STAMP) ## back up the local stack (mongodump with its oplog) into compose/backups
	$(HAREL_STACK) backup

restore: $(STACK_STAMP) ## restore FILE=compose/backups/<archive> (YES=1 to confirm): workers paused, oplog replayed
	$(HAREL_STACK) restore "$(FILE)" $(if $(YES),--yes,)

demo: $(SDK_STAMP) ## no services needed: workers + the smoke workflow in one process on mongomock:// (installs the SDK only)
	@$(BIN)/harel demo

test: $(STAMP) $(MONGOSH_STAMP) ## the whole test suite (what CI runs); `python -m tests.report` then sums it up
	$(BIN)/python -m pytest --junitxml=.pytest_cache/last-run.xml

mutate: $(STAMP) ## plant each bug of tests/mutants/catalog.py in a scratch copy of the SDK; fail if a test run misses one (MUTATE_ARGS=--help)
	$(BIN)/python -m tests.mutants $(MUTATE_ARGS)

chaos: $(STAMP) ## worker processes killed, stopped and stalled under fork/join load, verified from the store (CHAOS_ARGS=--help)
	$(BIN)/python -m tests.chaos $(CHAOS_ARGS)

lint: $(STAMP) ## ruff (lint + format check), ansible-lint, helm lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd playbooks && PATH="$(CURDIR)/$(BIN):$$PATH" ansible-lint --offline --profile production
	$(BIN)/python -m tests.infra.helm_lint

bench: $(STAMP) ## benchmarks; prints a table and writes bench/results/latest.md
	$(BIN)/python -m bench
