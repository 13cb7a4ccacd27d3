# pelengine developer tasks. `make` (or `make help`) lists them.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONF   ?= conf/local.yaml
DEMO   ?= demo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
WHEEL  := dist/pelengine-$(VERSION)-py3-none-any.whl
PYZIP  := dist/pelengine-$(VERSION).zip

.DEFAULT_GOAL := help
.PHONY: help install run notebook test lint typecheck bench bench-incremental bench-hot bench-groups bench-udf dist clean

help: ## list the targets
	@echo "pelengine - make targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-zA-Z_-]*:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "variables: PYTHON=$(PYTHON) CONF=$(CONF) DEMO=$(DEMO) PYTEST_ARGS=... BENCH_ARGS=..."

install: $(STAMP) ## create .venv (python3.11) and install the package with dev extras (once per pyproject change)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[spark,dev]'
	@touch $(STAMP)

run: install ## generate a demo events table, reconstruct it, print the summary (one Spark session)
	$(BIN)/pelengine demo --dir $(DEMO) --conf $(CONF)

notebook: install ## run notebooks/explore_run.ipynb on the demo output (after `make run`); executed copy in build/notebooks/
	@test -d $(DEMO)/out || { echo "no $(DEMO)/out: run 'make run' first"; exit 1; }
	$(BIN)/python notebooks/execute.py notebooks/explore_run.ipynb build/notebooks/explore_run.ipynb \
	    -p OUT_ROOT=$(DEMO)/out -p EVENTS_PATH=$(DEMO)/events -p "CONF_FILES=['$(CONF)']"

test: install ## run the test suite (PYTEST_ARGS="-k ..." to narrow)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install ## mypy on the package
	$(BIN)/mypy -p pelengine

bench: install ## job vs floor vs engine vs Redis, one run (10M events; BENCH_ARGS="--events 1M" or "--series 1M,3M,10M")
	$(BIN)/python benchmarks/bench.py --conf conf/bench.yaml $(BENCH_ARGS)

bench-incremental: install ## time an incremental night (1% new) against a full recomputation (5M events; BENCH_ARGS="--events N")
	$(BIN)/python benchmarks/incremental_night.py $(BENCH_ARGS)

bench-hot: install ## Python worker RSS of one hot stream (20M events; BENCH_ARGS="--events 1M" or "--series 1M,5M,20M")
	$(BIN)/python benchmarks/hot_stream.py $(BENCH_ARGS)

bench-groups: install ## one stream, 16 groups: the job split by group against one task (1M events; BENCH_ARGS="--events 300k")
	$(BIN)/python benchmarks/many_groups.py $(BENCH_ARGS)
bench-udf: install ## the replay UDF alone, in-process: CPU-s per 1M events (300k events; BENCH_ARGS="--events 1M")
	$(BIN)/python benchmarks/replay_udf.py $(BENCH_ARGS)

dist: install ## build the wheel (pip, Databricks) and the same as a .zip (spark-submit --py-files) into dist/
	rm -rf build dist
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir dist .
	cp $(WHEEL) $(PYZIP)
	rm -rf build
	@echo "built $(WHEEL) and $(PYZIP)"

clean: ## remove build, demo and cache outputs (keeps .venv)
	rm -rf $(DEMO) out build dist *.egg-info spark-warehouse metastore_db derby.log
	rm -rf .pytest_cache .mypy_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
