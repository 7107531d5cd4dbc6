# `make bench` and `make test` work on a fresh machine: both create .venv and install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# GPUS=N runs on N GPUs; unset, it uses every visible GPU, or the CPU (gloo) when there is none.
GPU_COUNT := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GPUS ?= $(filter-out 0,$(GPU_COUNT))
BENCH_OUT ?= results/bench

.PHONY: install bench test clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Until sweeps exist: one small DDP run, printing where its record is.
bench: install
ifneq ($(strip $(GPUS)),)
	$(BIN)/ddpbench run --workload gpt2 --device cuda --nproc $(GPUS) --precision bf16 --out $(BENCH_OUT)
else
	$(BIN)/ddpbench run --workload mlp --device cpu --nproc 2 --out $(BENCH_OUT)
endif

test: install
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV) *.egg-info
