# Two commands do everything on a fresh machine: `make run` and `make test` (README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: 2.13.0 is a CPU wheel on these machines' disk; an unpinned torch pulls a CUDA build.
TORCH := torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install install-test run test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[plot]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) install -e '.[plot,test,ray]'
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

run: install
	$(BIN)/longbert extract examples/corpus.csv --id-col id --keep-col title -o out/example.parquet --overwrite

test: install-test
	$(BIN)/python -m pytest -q

# Issue 4's benchmark, about 10 minutes on 2 cores: one markdown table, also written to bench/results.md.
# Shorter: make bench BENCH_ARGS="--docs 100 --quick" (--quick skips the scale pair: 150 and 1,500 documents).
bench: install
	$(BIN)/python -c "import sentence_transformers, ray.data" 2>/dev/null || $(PIP) install -e '.[bench,ray]'
	$(BIN)/python bench/run_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/read_speed.py

clean:
	rm -rf out .pytest_cache .hypothesis
