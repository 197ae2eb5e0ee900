#!/usr/bin/env bash
# The project's environment (torch, then cosmos-train[dev] editable) built in $VENV, or reused there when it was
# built from the same inputs (KEY; scripts/env_reuse.sh). `make setup` calls it when VENV_CACHE names a folder
# (CI: .ci/run), to keep the environment outside the checkout and link .venv to it; without VENV_CACHE the
# Makefile builds .venv in the checkout itself, as a user's `make setup` does.
#
#   VENV=~/.cache/cosmos-train/venv-dev-KEY KEY=KEY TORCH_SPEC=torch==2.13.0 bash scripts/dev_env.sh
set -euo pipefail

VENV=${VENV:?give VENV, the folder of the environment}
KEY=${KEY:-}
TORCH_SPEC=${TORCH_SPEC-torch==2.13.0}
PY=${PYTHON:-python3}

pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }

# shellcheck source=scripts/env_reuse.sh
source "$(dirname "$0")/env_reuse.sh"
env_lock
if env_reusable; then
  echo "dev_env: reusing $VENV, built from the same inputs (key $KEY)"
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  pip install --upgrade pip
  if [ -n "$TORCH_SPEC" ]; then pip install "$TORCH_SPEC"; fi
  pip install -e ".[dev]"
  env_stamp
fi
env_point_here
