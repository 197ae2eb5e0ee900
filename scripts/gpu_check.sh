#!/usr/bin/env bash
# One check of the training stack on a lent GPU machine: the figures bench/RESULTS.md leaves pending
# (bench/gpu_check.py says what each step runs). The machine has Python 3.12 with torch (CUDA), transformers,
# peft, safetensors and accelerate, no package index and no network: what else the GPU path imports comes as
# the wheels of scripts/gpu_wheels.txt (at most 60 MiB), downloaded here and carried with the working tree.
#
#   scripts/gpu_check.sh --fetch         here, before the device call: the kit (cp312, manylinux x86_64) into
#                                        .gpu-wheels/cp312 (git-ignored), checked whole and under 60 MiB
#   scripts/gpu_check.sh OUT             on the GPU machine, e.g. the device call
#                                        `bash scripts/gpu_check.sh $OUT` carrying [".gpu-wheels"]: installs exactly
#                                        the listed wheels into a fresh folder, runs the check, prints one table
#                                        and writes OUT/gpu_check.json, in at most 8 minutes
#   scripts/gpu_check.sh --dry-run OUT   here, on the CPU: the kit is whole. Fetches the cp312 kit (its size),
#                                        builds (once, cached under ~/.cache/cosmos-train/gpu-check-env/<key>) a
#                                        clean venv holding only what the machine has (torch, transformers, peft,
#                                        safetensors, accelerate at .venv's versions, and their dependencies),
#                                        installs exactly the listed wheels (this interpreter's build of the same
#                                        versions) into a fresh folder and runs every step on the tiny model.
#
# Environment: PYTHON (the GPU machine's interpreter, default python3), GPU_CHECK_KIT (default .gpu-wheels),
# GPU_CHECK_CACHE (default ~/.cache/cosmos-train), GPU_CHECK_BUDGET_S (the whole run, default 480).
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) stops the script too

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIST=$ROOT/scripts/gpu_wheels.txt
KIT=${GPU_CHECK_KIT:-$ROOT/.gpu-wheels}
CACHE=${GPU_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cosmos-train}
MAX_KIT_BYTES=$((60 * 1024 * 1024))
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

die() {
    echo "gpu_check.sh: $*" >&2
    exit 2
}

pins() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$LIST" | grep -v '^$'; }

# The pip that downloads (here): .venv's, else python3's.
download_pip() {
    if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python -m pip"; else echo "python3 -m pip"; fi
}

# check_kit DIR: exactly one wheel per listed pin, nothing else, at most 60 MiB; prints the count and size.
check_kit() {
    python3 - "$1" "$LIST" "$MAX_KIT_BYTES" <<'EOF'
import re
import sys
from pathlib import Path

folder, listing, cap = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


pins = [line.split("#")[0].strip() for line in listing.read_text().splitlines()]
want = {(norm(p.split("==")[0]), p.split("==")[1]): p for p in pins if p}
have: dict[tuple[str, str], list[str]] = {}
files = sorted(folder.glob("*.whl")) if folder.is_dir() else []
for f in files:
    name, version = f.name.split("-")[:2]
    have.setdefault((norm(name), version), []).append(f.name)
problems = [f"missing {want[k]}" for k in want if k not in have]
problems += [f"not listed: {n}" for k, names in have.items() if k not in want for n in names]
problems += [f"two wheels for one pin: {names}" for names in have.values() if len(names) > 1]
problems += [f"not a wheel: {f.name}" for f in folder.iterdir() if f.suffix != ".whl"] if folder.is_dir() else []
size = sum(f.stat().st_size for f in files)
if size > cap:
    problems.append(f"{size / 2**20:.1f} MiB in all, over the {cap / 2**20:.0f} MiB the kit may take")
if problems:
    print(f"kit {folder}: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"kit {folder}: {len(files)} wheels, {size / 2**20:.1f} MiB")
EOF
}

# fetch DIR PYVER: the listed wheels for CPython PYVER (3.12 on the GPU machine), manylinux x86_64.
fetch() {
    local dir=$1 pyver=$2 tmp
    if check_kit "$dir" 2>/dev/null; then return 0; fi # already whole: nothing to download
    mkdir -p "$(dirname "$dir")"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    # shellcheck disable=SC2046
    $(download_pip) download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
        --abi "cp${pyver/./}" "${PLATFORMS[@]}" -d "$tmp" $(pins)
    check_kit "$tmp" >/dev/null || {
        rm -rf "$tmp"
        die "the downloaded kit is not whole (above)"
    }
    rm -rf "$dir"
    mv "$tmp" "$dir"
    check_kit "$dir"
}

# install PY KITDIR TARGET: exactly the kit's wheels into TARGET (pip without an index, or unzipped without pip).
install_kit() {
    local py=$1 kitdir=$2 target=$3
    rm -rf "$target"
    mkdir -p "$target"
    if "$py" -m pip --version >/dev/null 2>&1; then
        "$py" -m pip install -q --no-index --no-deps --no-compile --target "$target" "$kitdir"/*.whl
    else
        "$py" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
            "$target" "$kitdir"/*.whl
    fi
    # What is in TARGET is what is listed, no more, no less.
    "$py" - "$target" "$LIST" <<'EOF'
import importlib.metadata
import re
import sys
from pathlib import Path


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


pins = [line.split("#")[0].strip() for line in Path(sys.argv[2]).read_text().splitlines()]
want = {norm(p.split("==")[0]): p.split("==")[1] for p in pins if p}
got = {norm(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=[sys.argv[1]])}
if got != want:
    sys.exit(f"installed {sorted(got.items())} != listed {sorted(want.items())}")
EOF
}

# The clean environment of the dry run: .venv's interpreter, only the machine's five packages at .venv's versions.
clean_env() {
    local base versions key env
    [ -x "$ROOT/.venv/bin/python" ] || die "no .venv: run make setup first (its versions pin the clean environment)"
    base=$("$ROOT/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
    versions=$("$ROOT/.venv/bin/python" -c '
import importlib.metadata as m
names = ("torch", "transformers", "peft", "safetensors", "accelerate")
print(" ".join(n + "==" + m.version(n).split("+")[0] for n in names))')
    [ -n "$versions" ] || die "could not read the versions of .venv"
    key=$(printf '%s %s' "$("$base" -c 'import sys; print(sys.version)')" "$versions" | sha256sum | cut -c1-16)
    env=$CACHE/gpu-check-env/$key
    if [ ! -f "$env/.complete" ]; then
        echo "gpu_check.sh: building the clean environment $env ($versions)" >&2
        rm -rf "$env"
        mkdir -p "$(dirname "$env")"
        "$base" -m venv "$env" >&2
        # shellcheck disable=SC2086
        "$env/bin/python" -m pip install -q $versions >&2
        echo "$versions" >"$env/.complete"
    fi
    echo "$env"
}

MODE=gpu
case "${1:-}" in
--fetch) MODE=fetch ;;
--dry-run) MODE=dry ;;
-h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
"") die "usage: scripts/gpu_check.sh [--fetch | --dry-run] OUT" ;;
esac
[ "$MODE" = gpu ] || shift

if [ "$MODE" = fetch ]; then
    fetch "$KIT/cp312" 3.12
    exit 0
fi

OUT=${1:-}
[ -n "$OUT" ] || die "give the output folder: scripts/gpu_check.sh [--dry-run] OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [ "$MODE" = gpu ]; then
    PY=${PYTHON:-python3}
    if [ -z "${PYTHON:-}" ] && ! python3 -c 'import torch' 2>/dev/null; then PY=python; fi
    "$PY" -c 'import torch' 2>/dev/null || die "$PY cannot import torch: set PYTHON to the machine's interpreter"
    tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    check_kit "$KIT/$tag" || die "no whole kit in $KIT/$tag: run scripts/gpu_check.sh --fetch here and carry .gpu-wheels"
    target=${TMPDIR:-/tmp}/cosmos-gpu-check-site
    install_kit "$PY" "$KIT/$tag" "$target"
    budget=$((${GPU_CHECK_BUDGET_S:-480} - SECONDS - 15))
    PYTHONPATH="$target:$ROOT" exec "$PY" "$ROOT/bench/gpu_check.py" --budget-s "$budget" "$OUT"
fi

# --dry-run: the real kit first (downloadable, whole, its size), then the same pins for this interpreter.
fetch "$KIT/cp312" 3.12
env=$(clean_env)
PY=$env/bin/python
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
listhash=$(sha256sum "$LIST" | cut -c1-12)
fetch "$CACHE/gpu-check-wheels/cp${pyver/./}-$listhash" "$pyver"
target=$(mktemp -d "${TMPDIR:-/tmp}/cosmos-gpu-check-site.XXXXXX")
trap 'rm -rf "$target"' EXIT
install_kit "$PY" "$CACHE/gpu-check-wheels/cp${pyver/./}-$listhash" "$target"
PYTHONPATH="$target:$ROOT" CUDA_VISIBLE_DEVICES="" "$PY" "$ROOT/bench/gpu_check.py" --dry-run \
    --budget-s "${GPU_CHECK_BUDGET_S:-1500}" "$OUT"
