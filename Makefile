# Two commands are the front door: `make demo` and `make test`. Both set up .venv once.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.asyncpp-installed
# The CPU wheel of torch that this kind of machine carries locally; GPU users override it
# (e.g. `make test TORCH_SPEC=torch`) or install the package into their own environment.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test test-fast verify book lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,book,hf]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/asyncpp-train --config configs/demo.toml

test: $(STAMP)
	$(PY) -m pytest tests/ verify/

test-fast: $(STAMP)
	$(PY) -m pytest tests/ -m "not multiprocess"

verify: $(STAMP)
	$(PY) -m pytest verify/

book: $(STAMP)
	$(VENV)/bin/jupyter-book build -W -n --keep-going book/

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests verify theory benchmarks experiments book

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf book/_build .pytest_cache
