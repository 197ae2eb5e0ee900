# shellcheck shell=bash
# Sourced by the scripts that build a virtual environment kept by a key of its inputs (scripts/dev_env.sh: the
# project's .venv under CI; scripts/vllm_cpu_env.sh: the vLLM one). With KEY set (the Makefile passes a hash of
# the inputs), an environment that holds $VENV/.installed-$KEY was built from the same inputs and is not
# reinstalled, whatever the files' mtimes (a fresh clone's are all "now"); only its editable install of
# cosmos-train is pointed at this checkout when it points elsewhere (an environment kept outside the checkout,
# as CI keeps it, was built from another clone). A lock in the environment lets two runs share it.
#
#   env_lock                 # wait for another run building or linking $VENV
#   if ! env_reusable; then ...install...; env_stamp; fi
#   env_point_here           # the editable install at this checkout; the stamp's mtime: its last use

env_lock() {
  mkdir -p "$VENV"
  exec 9>"$VENV/.build.lock"
  flock 9
}

env_reusable() { [ -n "${KEY:-}" ] && [ -e "$VENV/.installed-$KEY" ]; }

env_stamp() {
  rm -f "$VENV"/.installed-*
  touch "$VENV/.installed-${KEY:-none}"
}

env_point_here() {
  local here linked
  here=$(pwd -P)
  linked=$(cd / && "$VENV/bin/python" -c 'import cosmos_train, pathlib; print(pathlib.Path(cosmos_train.__file__).resolve().parents[1])' 2>/dev/null || true)
  if [ "$linked" != "$here" ]; then
    echo "pointing cosmos-train's editable install in $VENV at $here (was: ${linked:-none})"
    "$VENV/bin/python" -m pip --disable-pip-version-check -q install --no-deps -e .
  fi
  touch "$VENV/.installed-${KEY:-none}" # last used: what a cache pruner goes by
}
