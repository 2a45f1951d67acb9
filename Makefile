# Two commands are the front door: `make demo` and `make test`. Both set up .venv once.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.asyncpp-installed
# The CPU wheel of torch that this kind of machine carries locally. GPU users choose another
# build, e.g. `make setup TORCH_SPEC=torch TORCH_INDEX=https://download.pytorch.org/whl/cu124`;
# a TORCH_SPEC/TORCH_INDEX different from the one .venv was set up with reinstalls torch.
TORCH_SPEC_DEFAULT := torch==2.13.0
TORCH_SPEC ?= $(TORCH_SPEC_DEFAULT)
TORCH_INDEX ?=
TORCH_WANT := $(TORCH_SPEC)$(if $(TORCH_INDEX), --index-url $(TORCH_INDEX))
TORCH_RECORD := $(VENV)/.asyncpp-torch
# what .venv was set up with (a .venv older than this record: the default)
TORCH_HAVE := $(or $(shell cat $(TORCH_RECORD) 2>/dev/null),$(TORCH_SPEC_DEFAULT))
# Where `make compare` writes its three runs and the plot, and extra trainer options for it
# (the tests pass a temporary folder and a few steps).
RUNS ?= runs
COMPARE_ARGS ?=
DEMO_ARGS ?=

.PHONY: setup demo compare test test-fast verify book lint bench clean

setup: $(STAMP)

ifneq ($(TORCH_WANT),$(TORCH_HAVE))
# another torch build was asked for: redo the install even though pyproject.toml is unchanged
.PHONY: $(STAMP)
endif

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
ifneq ($(TORCH_WANT),$(TORCH_HAVE))
	-$(PY) -m pip uninstall -y -q torch
endif
	$(PY) -m pip install -q "$(TORCH_SPEC)"$(if $(TORCH_INDEX), --index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e ".[dev,book,hf]"
	@echo '$(TORCH_WANT)' > $(TORCH_RECORD)
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/asyncpp-train --config configs/demo.toml $(DEMO_ARGS)

# The demo model three ways — synchronous, PipeDream-2BW (one step of delay), 2BW + Error
# Feedback — then one plot of the three (the runs the train how-to plots).
COMPARE := $(VENV)/bin/asyncpp-train --config configs/demo.toml --run.overwrite true
compare: $(STAMP)
	$(COMPARE) --pipeline.schedule none --pipeline.stages 1 --pipeline.microbatches 1 \
	    --delay.correction none --run.name muon-sync --run.dir $(RUNS)/muon-sync $(COMPARE_ARGS)
	$(COMPARE) --pipeline.schedule 2bw --simulate --delay.correction none \
	    --run.name muon-2bw --run.dir $(RUNS)/muon-2bw $(COMPARE_ARGS)
	$(COMPARE) --pipeline.schedule 2bw --simulate --delay.correction ef \
	    --run.name muon-2bw-ef --run.dir $(RUNS)/muon-2bw-ef $(COMPARE_ARGS)
	$(VENV)/bin/asyncpp-plot $(RUNS)/muon-sync $(RUNS)/muon-2bw $(RUNS)/muon-2bw-ef \
	    -o $(RUNS)/compare.png

test: $(STAMP)
	$(PY) -m pytest tests/ verify/

test-fast: $(STAMP)
	$(PY) -m pytest tests/ -m "not multiprocess"

verify: $(STAMP)
	$(PY) -m pytest verify/

# The build, then the browser check of every page it wrote (book/check; headless Debian
# chromium + chromedriver; first-screen shots in book/_build/screens/).
book: $(STAMP)
	$(VENV)/bin/jupyter-book build -W -n --keep-going book/
	$(PY) -m book.check book/_build/html --screens book/_build/screens

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests verify theory benchmarks experiments book

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf book/_build .pytest_cache
