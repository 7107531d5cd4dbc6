# `make bench` and `make test` work on a fresh machine: both create .venv and install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# GPUS=N sweeps world sizes 1, 2, 4, ... N on GPUs; unset, every visible GPU, or the CPU suite
# (gloo, world sizes up to the core count) when there is none. BENCH_ARGS passes more options.
GPUS ?=
BENCH_ARGS ?=

.PHONY: install install-test bench test test-all test-fast lint gate clean hta-venv otava-venv gpu-check gpu-check-one gpu-check-wheels docs

# setuptools boxes a notice about editable installs in asterisks; a newcomer reads it as an error.
# It only says that folders named like the package take precedence over it, so it is filtered.
QUIET_EDITABLE := PYTHONWARNINGS='ignore:Editable installation'

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(QUIET_EDITABLE) $(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

# USE_PYTHON=python3: the interpreter given, with the torch it already has (a GPU node's PyTorch
# container, a conda or module environment), instead of .venv. `install` then checks that torch and
# torchvision are there and new enough (one line and exit code 2 if not), and pip installs only what
# else ddpbench needs to run and that environment lacks, holding torch and torchvision where they
# are and upgrading nothing already there, and says what it added; nothing when all of it is there
# already. The test tools (pytest-xdist, ruff, playwright, ...) go in only for test, test-fast and
# lint (install-test), which say so. Every command runs this checkout (PYTHONPATH), as .venv's
# editable install does.
USE_PYTHON ?=
ifeq ($(USE_PYTHON),)
PY := $(BIN)/python
DDPBENCH := $(BIN)/ddpbench
install: $(STAMP)
install-test: $(STAMP)
else
PY := PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(USE_PYTHON)
DDPBENCH := $(PY) -m ddpbench
install:
	$(PY) -m ddpbench.host.torch_env --requirements . --quiet
install-test:
	$(PY) -m ddpbench.host.torch_env --requirements . --extra test --quiet
endif

bench: install
	$(DDPBENCH) sweep $(if $(GPUS),--gpus $(GPUS)) $(BENCH_ARGS)

# The suite again, compared with the stored baseline of this machine class and suite
# (store one first: ddpbench history baseline results/<sweep-id>). GATE_ARGS go to `ddpbench gate`.
GATE_ID := gate-$(shell date +%Y%m%d-%H%M%S)
GATE_ARGS ?=
# GATE_BASELINE=history gates against the stored history since its last change point instead.
GATE_BASELINE ?= auto
# BASE=<git ref> instead: a same-job A/B (ddpbench ab) of this working tree against that ref's code,
# built once in .gate-base/<sha>/ with its own .venv; BASE_ROUNDS rounds of BASE_RUN_ARGS (the
# options of ddpbench run), GATE_ARGS as verdict options. Drift between sweeps cannot fake it.
BASE ?=
# CONFIRM=<git ref>: the stored-baseline gate as above, and a regression it finds is rerun as a
# same-job A/B against that ref's code (built as for BASE=) before the job fails.
CONFIRM ?=
BASE_ROUNDS ?= 5
BASE_RUN_ARGS ?= --workload mlp --strategy ddp $(if $(GPUS),--device cuda --nproc $(GPUS),--nproc 2)
# GNU make turns any failing exit code into its own 2: the gate runs through ddpbench.gate.ci,
# whose last line says the gate's own exit code and what it means (a CI job that needs 1, 3 and 4
# as themselves calls `python -m ddpbench.gate.ci -- ddpbench gate ...` or `ddpbench gate` directly).
gate: install
ifneq ($(BASE),)
	$(PY) -m ddpbench.gate.ci --name 'ddpbench ab (make gate BASE=$(BASE))' -- \
		$(PY) -m ddpbench.gate.base_env '$(BASE)' --rounds $(BASE_ROUNDS) $(GATE_ARGS) -- $(BASE_RUN_ARGS)
else
ifneq ($(CONFIRM),)
	$(PY) -m ddpbench.gate.base_env '$(CONFIRM)' --prepare
endif
	$(DDPBENCH) sweep $(if $(GPUS),--gpus $(GPUS)) --sweep-id $(GATE_ID) $(BENCH_ARGS)
	$(PY) -m ddpbench.gate.ci -- $(DDPBENCH) gate --baseline $(GATE_BASELINE) --candidate results/$(GATE_ID) \
		$(if $(CONFIRM),--confirm-with "$$($(PY) -m ddpbench.gate.base_env '$(CONFIRM)' --prepare)") $(GATE_ARGS)
endif

# The suite within 10 minutes on a 2-core machine: every in-process test and at least one real
# launch of each path; it ends with its 15 slowest tests, where to look first to make it quicker.
test: install-test
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 -m "not test_all" tests

# Everything: make test's tests and the real launches of paths make test already launches once
# (marked test_all), in one run; what CI runs.
test-all: install-test
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 tests

# The suite on saved records and traces only, in about 2 minutes: nothing marked `launches`
# (torchrun runs, worker processes, a browser).
test-fast: install-test
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not launches" tests

# ruff's lint and format check, configured in pyproject.toml (`ruff format .` fixes the format).
lint: install-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Every GPU path once, within a budget sized to the node, with the interpreter USE_PYTHON names (one
# that already has torch: nothing is installed or downloaded). Summary: results/gpu-check-*/gpu_check.{txt,json}.
# PYTHON=, its older spelling, still works and says so; given both, they must name the same interpreter.
GPU_CHECK_ARGS ?=
GPU_CHECK_PYTHON := $(if $(USE_PYTHON),$(USE_PYTHON),$(if $(filter command line,$(origin PYTHON)),$(PYTHON)))
gpu-check:
ifeq ($(GPU_CHECK_PYTHON),)
	@echo "make gpu-check: give the interpreter that has the node's torch: make gpu-check USE_PYTHON=python3" >&2; exit 2
endif
ifeq ($(origin PYTHON)$(if $(USE_PYTHON),+use),command line+use)
ifneq ($(PYTHON),$(USE_PYTHON))
	@echo "make gpu-check: PYTHON=$(PYTHON) and USE_PYTHON=$(USE_PYTHON) name two interpreters; give USE_PYTHON only" >&2; exit 2
endif
endif
ifeq ($(origin PYTHON)$(if $(USE_PYTHON),+use),command line)
	@echo "make gpu-check: PYTHON= is deprecated here, use USE_PYTHON=$(PYTHON) as every target takes" >&2
endif
	PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(GPU_CHECK_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

# One lent GPU within 5 minutes: the paths one GPU reaches, each line with its measured seconds beside
# its reserve (GPU_CHECK_ARGS=--dry-run prints the plan and where each reserve comes from). The
# interpreter is USE_PYTHON, else python3: on a lent machine, the image's own. What it lacks of
# ddpbench's dependencies comes from .gpu-check-wheels/, which gpu-check-wheels fills where pip works
# (WHEELS_PYTHON: the lent machine's Python; WHEELS_MACHINE: x86_64 or aarch64); never committed.
WHEELS_PYTHON ?= 3.12
WHEELS_MACHINE ?= x86_64
gpu-check-one:
	PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(if $(USE_PYTHON),$(USE_PYTHON),python3) benchmarks/gpu_check_one.py $(GPU_CHECK_ARGS)

gpu-check-wheels: install
	$(PY) benchmarks/gpu_check_wheels.py --download --python-version $(WHEELS_PYTHON) --machine $(WHEELS_MACHINE)

clean:
	rm -rf $(VENV) *.egg-info

# HolisticTraceAnalysis in an environment of its own, for benchmarks/trace_speed.py only.
.venv-hta/bin/python:
	$(PYTHON) -m venv .venv-hta
	.venv-hta/bin/pip install --quiet holistictraceanalysis==0.5.0

hta-venv: .venv-hta/bin/python

# Apache Otava (change points in the history) in an environment of its own: it pins numpy.
# ddpbench calls it as a subprocess; without it a documented fallback rule finds change points.
.venv-otava/bin/python:
	$(PYTHON) -m venv .venv-otava
	.venv-otava/bin/pip install --quiet apache-otava==0.8.0

otava-venv: .venv-otava/bin/python

# The documentation site (docs/, nav in mkdocs.yml) built into site/, with mkdocs and
# mkdocs-material in an environment of their own. --strict fails on a broken link or a page
# missing from the nav.
.venv-docs/bin/mkdocs:
	$(PYTHON) -m venv .venv-docs
	.venv-docs/bin/pip install --quiet mkdocs==1.6.1 mkdocs-material==9.8.2

docs: .venv-docs/bin/mkdocs
	NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --site-dir site
