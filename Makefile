# pelengine developer tasks. `make` (or `make help`) lists them.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONF   ?= conf/local.yaml
# pytest workers for `make test` (pytest-xdist; 0: one process). Each worker starts its
# own Spark session and servers; most tests wait on a JVM or a server, so two workers
# on two cores take ~2/3 of the time one does.
TEST_WORKERS ?= 2
# make identical: where the logs are written once, and this checkout's digests (IDENTICAL_ARGS=--big adds 1M events)
IDENTICAL_LOGS ?= /tmp/pelengine-identical-logs
IDENTICAL_OUT ?= identical.json
DEMO   ?= demo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
WHEEL  := dist/pelengine-$(VERSION)-py3-none-any.whl
PYZIP  := dist/pelengine-$(VERSION).zip

# ---- the native replay core (native/, Rust; docs/native.md) -----------------------------
# cargo from PATH, else rustup's default place; recipes get its directory on PATH (maturin
# calls cargo). No cargo (or PELENGINE_NATIVE=0): `make install` says the native engine is
# not built and goes on (the pure package works), unless PELENGINE_REQUIRE_NATIVE=1 (CI),
# when it fails. A failed native build fails `make install` (PELENGINE_NATIVE=0 skips it).
CARGO := $(or $(shell command -v cargo 2>/dev/null),$(wildcard $(HOME)/.cargo/bin/cargo))
ifneq ($(CARGO),)
export PATH := $(patsubst %/,%,$(dir $(CARGO))):$(PATH)
endif
PELENGINE_REQUIRE_NATIVE ?=
PELENGINE_NATIVE ?=
BUILD_NATIVE := $(if $(filter 0,$(PELENGINE_NATIVE)),,$(CARGO))
NATIVE_STAMP := $(VENV)/.installed-native
# what a change of rebuilds the module: every Rust source and every manifest under native/
NATIVE_SRC := $(shell find native -path native/target -prune -o -path native/py/dist -prune -o \
    -type f \( -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock -o -name pyproject.toml \) \
    -print 2>/dev/null)
# the manylinux tag of `make dist`'s native wheel: 2_34 is the lowest the library built on
# Debian 12 (glibc 2.36) satisfies (docs/native.md); a builder with an older glibc or
# `--zig` (MATURIN_ARGS) can ask for less
NATIVE_COMPAT ?= manylinux_2_34
# more `maturin build` options for `make dist` (e.g. --zig)
MATURIN_ARGS ?=
# pyo3 (cargo test, clippy, maturin) configured for the venv's interpreter
NATIVE_ENV := PYO3_PYTHON=$(abspath $(BIN)/python)
MATURIN := $(NATIVE_ENV) $(BIN)/maturin
# cargo test binaries that call Python link libpython: where the venv's interpreter keeps it
PYLIBDIR = $(shell $(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")' 2>/dev/null)
comma := ,
NO_NATIVE := { echo "make: WARNING: $(if $(CARGO),PELENGINE_NATIVE=0,cargo not found (not on PATH$(comma) not in ~/.cargo/bin)): the native engine (pelengine_native) is NOT built; pelengine runs with its Python engine.$(if $(CARGO),, Install Rust (https://rustup.rs) and re-run make.)" >&2; \
    if [ "$(PELENGINE_REQUIRE_NATIVE)" = 1 ]; then echo "make: PELENGINE_REQUIRE_NATIVE=1: the native engine is required, failing" >&2; exit 1; fi; }
NATIVE_FAILED := { echo "make: the native build failed (above): fix it, or build without the native engine: PELENGINE_NATIVE=0" >&2; exit 1; }
DEVELOP_NATIVE := VIRTUAL_ENV=$(abspath $(VENV)) $(MATURIN) develop --release --manifest-path native/py/Cargo.toml

.DEFAULT_GOAL := help
.PHONY: help install jars native run notebook test test-native lint typecheck bench bench-incremental bench-ingest bench-hot bench-groups bench-local bench-udf dist clean

help: ## list the targets
	@echo "pelengine - make targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-zA-Z_-]*:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "variables: PYTHON=$(PYTHON) CONF=$(CONF) DEMO=$(DEMO) PYTEST_ARGS=... TEST_WORKERS=$(TEST_WORKERS) BENCH_ARGS=..."
	@echo "           PELENGINE_NATIVE=0 (do not build the native engine) PELENGINE_REQUIRE_NATIVE=1 (fail when it is not built)"
	@echo "           PELENGINE_TEST_HEAVY=1 (make test: also the heavier store matrix, tests marked heavy)"
	@echo "           PELENGINE_TEST_CODEGEN=1 (make test: sessions keep Spark code generation, as users have it)"
	@echo "           NATIVE_COMPAT=$(NATIVE_COMPAT) MATURIN_ARGS=... (make dist's native wheel)"
	@echo "cargo: $(or $(CARGO),not found: the native engine is not built)"

install: $(STAMP) $(NATIVE_STAMP) jars ## create .venv (python3.11), install the package with dev extras, build the native engine (needs cargo), fetch delta-spark's jars (needs mvn)

# ---- delta-spark, Delta Lake on the JVM: its jars (jars/fetch.py; docs/deploy.md) -------
# Fetched once with Maven into jars/lib (ignored), matching the installed delta-spark and
# pyspark; sessions the project builds put them on the classpath. No mvn: a warning, and
# pelengine runs on its embedded delta-rs store, unless PELENGINE_REQUIRE_DELTA=1 (CI).
PELENGINE_REQUIRE_DELTA ?=
jars: | $(STAMP) ## fetch delta-spark's jars (io.delta:delta-spark_4.2_2.13 and what Spark lacks) into jars/lib, once
	@$(BIN)/python jars/fetch.py || { rc=$$?; \
	  if [ $$rc -ne 3 ] || [ "$(PELENGINE_REQUIRE_DELTA)" = 1 ]; then \
	    echo "make: delta-spark's jars are required (PELENGINE_REQUIRE_DELTA=1) or could not be fetched" >&2; exit 1; fi; }

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[spark,dev]'
	@touch $(STAMP)

# the native module, rebuilt when a Rust source or manifest under native/ changes
ifeq ($(BUILD_NATIVE),)
$(NATIVE_STAMP): | $(STAMP)
	@$(NO_NATIVE)
else
$(NATIVE_STAMP): $(NATIVE_SRC) | $(STAMP)
	$(DEVELOP_NATIVE) || $(NATIVE_FAILED)
	@touch $(NATIVE_STAMP)
endif

native: | $(STAMP) ## (re)build the native engine (pelengine_native, release) and install it into .venv
	@test -n "$(CARGO)" || { echo "make: cargo not found (not on PATH, not in ~/.cargo/bin): cannot build the native engine; install Rust (https://rustup.rs)" >&2; exit 1; }
	$(DEVELOP_NATIVE)
	@touch $(NATIVE_STAMP)

run: install ## generate a demo events table, reconstruct it, print the summary (one Spark session)
	$(BIN)/pelengine demo --dir $(DEMO) --conf $(CONF)

notebook: install ## run notebooks/explore_run.ipynb on the demo output (after `make run`); executed copy in build/notebooks/
	@test -d $(DEMO)/out || { echo "no $(DEMO)/out: run 'make run' first"; exit 1; }
	$(BIN)/python notebooks/execute.py notebooks/explore_run.ipynb build/notebooks/explore_run.ipynb \
	    -p OUT_ROOT=$(DEMO)/out -p EVENTS_PATH=$(DEMO)/events -p "CONF_FILES=['$(CONF)']"

# `make test` runs the suite on delta-spark, then the tests marked `stores` (and those of
# the embedded store itself) on the embedded store; without the jars, all on the embedded one.
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: install ## run the test suite on TEST_WORKERS workers, delta-spark then the embedded store (PYTEST_ARGS="-k ..." to narrow)
	@if $(BIN)/python jars/fetch.py --check >/dev/null; then \
	  echo "make test: pass 1 of 2, delta-spark (Delta Lake on the JVM)"; \
	  PELENGINE_TEST_STORE=delta-spark $(PYTEST) $(PYTEST_ARGS) || exit $$?; \
	  echo "make test: pass 2 of 2, the embedded store (tests marked stores or embedded)"; \
	  PELENGINE_TEST_STORE=embedded PELENGINE_TEST_PASS=stores $(PYTEST) $(PYTEST_ARGS); \
	else \
	  echo "make test: WARNING: no delta-spark jars (make jars needs mvn): one pass, on the embedded store" >&2; \
	  PELENGINE_TEST_STORE=embedded $(PYTEST) $(PYTEST_ARGS); \
	fi

test-native: $(STAMP) ## cargo test on the native workspace (native/: the Rust model and its Python face)
	@test -n "$(CARGO)" || { echo "make: cargo not found (not on PATH, not in ~/.cargo/bin): cannot test native/; install Rust (https://rustup.rs)" >&2; exit 1; }
	cd native && $(NATIVE_ENV) LD_LIBRARY_PATH=$(PYLIBDIR)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} cargo test --workspace
	@# library code has no panic paths (unwrap/expect/panic/unreachable/todo: denied by [workspace.lints] in native/Cargo.toml)
	@if (cd native && $(CARGO) clippy --version >/dev/null 2>&1); then \
	  cd native && $(NATIVE_ENV) $(CARGO) clippy --workspace --lib -q -- -D warnings; \
	else echo "make: cargo clippy not installed: the no-panic rule of native/ is not checked" >&2; fi

lint: install ## ruff check, ruff format --check; on native/ cargo fmt --check and cargo clippy -D warnings (when cargo exists)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
ifneq ($(CARGO),)
	cd native && cargo fmt --all --check
	cd native && $(NATIVE_ENV) cargo clippy --workspace --all-targets -- -D warnings
else
	@echo "make: cargo not found: native/ is not linted (cargo fmt, cargo clippy)" >&2
endif

typecheck: install ## mypy on the package
	$(BIN)/mypy -p pelengine

bench: install ## job vs floor vs engine vs Redis, one run (10M events; BENCH_ARGS="--events 1M" or "--series 1M,3M,10M")
	$(BIN)/python benchmarks/bench.py --conf conf/bench.yaml $(BENCH_ARGS)

bench-incremental: install ## time an incremental night (1% new) against a full recomputation (5M events; BENCH_ARGS="--events N")
	$(BIN)/python benchmarks/incremental_night.py $(BENCH_ARGS)

bench-ingest: install ## ingest-aof of a 10 MB AOF on the embedded store (no Spark session) and on delta-spark (BENCH_ARGS="--mb N")
	$(BIN)/python benchmarks/ingest_aof.py $(BENCH_ARGS)

bench-hot: install ## Python worker RSS of one hot stream (20M events; BENCH_ARGS="--events 1M" or "--series 1M,5M,20M")
	$(BIN)/python benchmarks/hot_stream.py $(BENCH_ARGS)

bench-groups: install ## one stream, 16 groups: the job split by group against one task (1M events; BENCH_ARGS="--events 300k")
	$(BIN)/python benchmarks/many_groups.py $(BENCH_ARGS)
bench-local: install ## reconstruct --runner local (no JVM) as a user runs it (20k and 1M events; BENCH_ARGS="--series 20k,1M,10M --spark")
	$(BIN)/python benchmarks/local_runner.py $(BENCH_ARGS)

bench-backlog: install ## one group's PEL of N entries acknowledged oldest first: replay CPU-s per 1k events at each N (flat = linear; BENCH_ARGS="--series 50k,400k")
	$(BIN)/python benchmarks/backlog.py $(BENCH_ARGS)

bench-udf: install ## the replay UDF alone, in-process: CPU-s per 1M events (300k events; BENCH_ARGS="--events 1M")
	$(BIN)/python benchmarks/replay_udf.py $(BENCH_ARGS)

identical: install ## digest every table of fixed runs of this checkout into IDENTICAL_OUT (a restructuring compares two: benchmarks/identical.py compare A B)
	@test -d $(IDENTICAL_LOGS) || $(BIN)/python benchmarks/identical.py logs $(IDENTICAL_LOGS)
	$(BIN)/python benchmarks/identical.py digest $(IDENTICAL_LOGS) $(IDENTICAL_OUT) $(IDENTICAL_ARGS)

dist: install ## into dist/: the pure wheel, the same as a .zip (--py-files), the native wheel (cp311-abi3, manylinux x86_64)
	rm -rf build dist
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir dist .
	cp $(WHEEL) $(PYZIP)
	rm -rf build
	@echo "built $(WHEEL) and $(PYZIP)"
ifeq ($(BUILD_NATIVE),)
	@$(NO_NATIVE)
else
	$(MATURIN) build --release --manifest-path native/py/Cargo.toml --interpreter $(abspath $(BIN)/python) \
	    --compatibility $(NATIVE_COMPAT) --out dist $(MATURIN_ARGS)
	@echo "built $$(ls dist/pelengine_native-*.whl)"
endif

clean: ## remove build, demo and cache outputs (keeps .venv)
	rm -rf $(DEMO) out build dist native/py/dist *.egg-info spark-warehouse metastore_db derby.log
	rm -rf .pytest_cache .mypy_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
