# Two commands: `make demo` and `make test`. Each creates .venv from scratch when missing.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test test-slow test-readme test-all lint bench venv clean

venv: $(STAMP)

# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/hrrbert demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# the slow and multi-process tests (CI runs them after `make test`)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow or distributed"

# every code block of README.md, run as written after the demo's job (about 40 min on 2 cores)
test-readme: $(STAMP)
	$(BIN)/python -m pytest -q -m readme tests/test_readme.py

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m ''

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python benchmarks/compile.py
	$(BIN)/python benchmarks/kernel.py

clean:
	rm -rf $(VENV) artifacts/programs artifacts/releases
