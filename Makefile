# `make bench` and `make test` work on a fresh machine: both create .venv and install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# GPUS=N sweeps world sizes 1, 2, 4, ... N on GPUs; unset, every visible GPU, or the CPU suite
# (gloo, world sizes up to the core count) when there is none. BENCH_ARGS passes more options.
GPUS ?=
BENCH_ARGS ?=

.PHONY: install bench test clean hta-venv

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

bench: install
	$(BIN)/ddpbench sweep $(if $(GPUS),--gpus $(GPUS)) $(BENCH_ARGS)

test: install
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV) *.egg-info

# HolisticTraceAnalysis in an environment of its own, for benchmarks/trace_speed.py only.
.venv-hta/bin/python:
	$(PYTHON) -m venv .venv-hta
	.venv-hta/bin/pip install --quiet holistictraceanalysis==0.5.0

hta-venv: .venv-hta/bin/python
