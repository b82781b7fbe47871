# Everything a fresh machine needs: Python ≥ 3.11 and Java 17 (for Spark). `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench java crash-matrix fuzz

$(STAMP): pyproject.toml setup.py $(wildcard src/cdclake/*.c)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

java:
	@command -v java >/dev/null || { echo "Spark needs Java 17: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }

demo: $(STAMP) java
	$(BIN)/cdclake demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test: $(STAMP) java lint
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not spark and not kafka"

# Every hit of every failpoint killed in turn, then run to the end (an hour or more; tests/spark/test_crash_matrix.py).
crash-matrix: $(STAMP) java
	$(BIN)/pytest -q --crash-matrix=full tests/spark/test_crash_matrix.py

bench: $(STAMP) java
	$(BIN)/python benchmarks/decode.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/rewrite.py
	$(BIN)/python benchmarks/serve.py

# FUZZ_COUNT mutants of real records per format through every decoder (tests/fuzz); figures: benchmarks/results.md
FUZZ_COUNT ?= 1000000
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz.run --count $(FUZZ_COUNT)
