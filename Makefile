# The two commands of the README's Quick start: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch is pinned first: on this CPU machine it takes the local wheel; an unpinned torch would pull
# GBs of CUDA wheels. A machine with CUDA torch already importable keeps its own (TORCH_SPEC=).
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test pytest pytest-parallel pytest-serial test-fast lint typecheck docs clean vllm-cpu-env \
	vllm-venv test-vllm oracle

# VENV_CACHE=DIR (CI: .ci/run) keeps the environment outside the checkout, at DIR/venv-dev-<key>, and links .venv
# to it: the next clone reuses it (scripts/dev_env.sh). The key hashes TORCH_SPEC, the two scripts that build it,
# pyproject.toml and python3's version, so a change of dependencies builds anew.
ifdef VENV_CACHE
VENV_KEY := $(shell { echo '$(TORCH_SPEC)'; cat scripts/dev_env.sh scripts/env_reuse.sh pyproject.toml; \
	python3 -V; } 2>&1 | sha256sum | cut -c1-12)
endif

$(VENV)/.installed: pyproject.toml
ifdef VENV_CACHE
	[ ! -e $(VENV) ] || [ -L $(VENV) ] || \
		{ echo "$(VENV) is a folder of this checkout: remove it to use VENV_CACHE"; exit 2; }
	VENV=$(VENV_CACHE)/venv-dev-$(VENV_KEY) KEY=$(VENV_KEY) TORCH_SPEC='$(TORCH_SPEC)' bash scripts/dev_env.sh
	ln -sfn $(VENV_CACHE)/venv-dev-$(VENV_KEY) $(VENV)
else
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PIP) install -q "$(TORCH_SPEC)"; fi
	$(PIP) install -q -e ".[dev]"
endif
	touch $@

setup: $(VENV)/.installed

# cosmos-rl itself, the oracle of the parity tests (tests/cosmos_rl_oracle.py): installed without its
# dependencies into a side folder, because its transformers<5 pin and CUDA packages do not fit .venv.
ORACLE_DIR ?= .cosmos-rl-oracle
COSMOS_RL_ORACLE_SPEC ?= cosmos-rl==0.4.7
$(ORACLE_DIR)/.installed: $(VENV)/.installed
	rm -rf $(ORACLE_DIR)
	$(PIP) install -q --no-deps --target $(ORACLE_DIR) "$(COSMOS_RL_ORACLE_SPEC)"
	touch $@

oracle: $(ORACLE_DIR)/.installed

demo: setup
	$(VENV)/bin/cosmos-train demo

# lint, typecheck, the docs site, then the suite (each also a target of its own: .ci/run times them apart)
test: lint typecheck docs pytest

# The suite in two parts, each printing its 40 slowest tests, each PYTEST_WORKERS at a time (pytest-xdist, a test
# file per worker so its module fixtures are made once; much of a test's time is a wait on a subprocess's start, a
# server or a flow's API, on one core): `pytest-parallel`, the tests not marked serial, one torch thread per worker
# (two workers of two threads on two cores would wait on each other's spinning threads), its files in the order they
# are collected (tests/integration first: the long ones start first and tests/unit's short ones fill the end, where
# pytest-xdist's default order, by the count of tests a file has, left the long one-test files last, on one worker),
# then `pytest-serial` (tests/conftest.py's SERIAL: real faults and bounds in seconds, measured with nothing but the
# part itself on the machine), collected from their own files only, in SERIAL's order (the longest first). A failure
# in the first part does not skip the second. PYTEST_WORKERS=0: one process each.
PYTEST_WORKERS ?= 2
PYTEST := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -q --durations=40
pytest: setup oracle
	rc=0; $(MAKE) --no-print-directory pytest-parallel || rc=$$?; \
	$(MAKE) --no-print-directory pytest-serial || [ $$rc != 0 ] || rc=$$?; \
	exit $$rc

pytest-parallel: setup oracle
	OMP_NUM_THREADS=1 $(PYTEST) -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" tests

pytest-serial: setup oracle
	$(PYTEST) -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m serial \
		$$($(PY) -c 'from tests.conftest import serial_paths; print(*serial_paths())')

# The unit tests alone (one process each, no torchrun, no Prefect server): under 2 minutes.
test-fast: setup oracle
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -q tests/unit

# The vLLM engine on a CPU: vllm-cpu in its own environment (see the script's header), .venv-vllm unless VLLM_VENV
# names another. VLLM_VENV_CACHE=DIR keeps it outside the checkout instead, at DIR/venv-vllm-<key>, where the next
# clone reuses it (CI: .ci/run). The key hashes the script (and scripts/env_reuse.sh), pyproject.toml and python3's
# version: a change to any of them builds anew, an unchanged one is reused whatever the files' mtimes (a fresh
# clone's are all "now"), its editable install re-pointed here.
VLLM_ENV_KEY := $(shell { cat scripts/vllm_cpu_env.sh scripts/env_reuse.sh pyproject.toml; python3 -V; } 2>&1 \
	| sha256sum | cut -c1-12)
ifdef VLLM_VENV_CACHE
VLLM_VENV := $(VLLM_VENV_CACHE)/venv-vllm-$(VLLM_ENV_KEY)
else
VLLM_VENV ?= .venv-vllm
endif
VLLM_TESTS := tests/integration/services/test_vllm_engine.py tests/integration/services/test_generation_contract.py \
	tests/integration/services/test_grpo_vllm.py tests/integration/services/test_vllm_families.py
# unit tests that run only where torchvision imports, as it does in this environment
TORCHVISION_TESTS := tests/unit/test_families.py::test_qwen3_vl_video_equals_transformers_video_processor \
	tests/unit/test_media.py::test_preprocess_video_matches_transformers_video_processor

vllm-cpu-env:
	VENV=$(VLLM_VENV) KEY=$(VLLM_ENV_KEY) bash scripts/vllm_cpu_env.sh

vllm-venv:  # where that environment is (`make -s vllm-venv`)
	@echo $(VLLM_VENV)

# Not part of `make test` (whose .venv has no vLLM); .ci/run runs both. The contract's hf cases run in
# `make test` already: only its vllm ones run here.
# Two at a time, a test file per worker, as the first part of `make pytest` (a test's time is much of it an
# engine's start on one core).
test-vllm: vllm-cpu-env
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline $(VLLM_VENV)/bin/python -m pytest \
		-q -rs -n $(PYTEST_WORKERS) --dist loadfile --durations=20 -k "not (test_generation_contract and hf)" \
		$(VLLM_TESTS) $(TORCHVISION_TESTS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy with pyproject.toml's [tool.mypy] (files = cosmos_train and what it imports). MYPY_CACHE_DIR=DIR (CI:
# .ci/run) keeps its cache outside the checkout: mypy checks each cached module's content hash, so another clone
# reuses what did not change (seconds instead of a minute) and re-checks what did.
MYPY_CACHE_DIR ?= .mypy_cache
typecheck: setup
	$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE_DIR)

# The docs/ pages as a site (mkdocs.yml): --strict fails on a broken link or anchor between pages and on a page
# missing from the nav. The site goes to .mkdocs-site/ (ignored). NO_MKDOCS_2_WARNING: mkdocs-material's banner
# about its end of life, printed on every build, is not a problem of these pages.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q

clean:
	rm -rf outputs .pytest_cache .mkdocs-site
