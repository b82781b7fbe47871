# Everything a fresh machine needs: Python ≥ 3.11, Java 17 (for Spark) and, for the tests, Maven (which fetches
# Apache Kafka and Spark's connectors, see jars/). `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench java jars crash-matrix fuzz

$(STAMP): pyproject.toml setup.py $(wildcard src/cdclake/native/*.c src/cdclake/native/*.h)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

java:
	@command -v java >/dev/null || { echo "Spark needs Java 17: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }

# jars/<set>/pom.xml copied with its dependencies into .cache/jars/<set>/, once (again when the pom changes).
.cache/jars/%/.fetched: jars/%/pom.xml
	@command -v mvn >/dev/null || { echo "the tests fetch Kafka and Spark's connectors with Maven: apt-get install -y maven" >&2; exit 1; }
	rm -rf $(@D)
	mvn -B -q -f $< dependency:copy-dependencies
	touch $@

jars: java .cache/jars/kafka/.fetched .cache/jars/spark/.fetched

demo: $(STAMP) java
	$(BIN)/cdclake demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test: $(STAMP) java jars lint
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not spark and not kafka"

# Every hit of every failpoint killed in turn, then run to the end (an hour or more; tests/pipeline/test_crash_matrix.py).
crash-matrix: $(STAMP) java
	$(BIN)/pytest -q --crash-matrix=full tests/pipeline/test_crash_matrix.py

bench: $(STAMP) java
	$(BIN)/python benchmarks/decode.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/rewrite.py
	$(BIN)/python benchmarks/serve.py

# FUZZ_COUNT mutants of real records per format through every decoder (tests/fuzz); figures: benchmarks/results.md
FUZZ_COUNT ?= 1000000
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz.run --count $(FUZZ_COUNT)
