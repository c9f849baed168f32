#!/usr/bin/env bash
# Makes the Python environment of the reference scripts in scripts/ (never
# needed to build, run or test dedloc):
#   scripts/make_refenv.sh [DIR]          (default DIR: scripts/.venv-ref, git-ignored)
#   export REFENV=scripts/.venv-ref       then: $REFENV/bin/python scripts/make_reference.py
# torch and numpy come from Debian (python3-torch 1.13, CPU only, and
# python3-numpy; installed here if missing), so the venv is made with
# --system-site-packages from Debian's python3; everything else is pinned in
# scripts/requirements-reference.txt and comes from PyPI.
#   REFENV_DRY_RUN=1 scripts/make_refenv.sh DIR   makes the venv and lets pip resolve the
#                                                 requirements without installing them
#   PYTHON=... scripts/make_refenv.sh DIR         another interpreter (it must see torch)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-scripts/.venv-ref}
PYTHON=${PYTHON:-/usr/bin/python3}

PACKAGES=(python3-venv python3-torch python3-numpy)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})) && [ -z "${REFENV_DRY_RUN:-}" ]; then
  echo "make_refenv: installing ${missing[*]} (Debian)"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
elif ((${#missing[@]})); then
  echo "make_refenv: dry run: would install ${missing[*]} (Debian)"
fi

if [ ! -x "$DIR/bin/python" ]; then
  echo "make_refenv: creating $DIR ($("$PYTHON" --version), with its system site-packages)"
  "$PYTHON" -m venv --system-site-packages "$DIR"
fi
if [ -n "${REFENV_DRY_RUN:-}" ]; then
  deps=()
  if ! "$DIR/bin/python" -c 'import torch' 2>/dev/null; then
    # Without Debian's torch, pip would fetch PyPI's (with its CUDA libraries)
    # just to resolve torch-optimizer's dependencies.
    echo "make_refenv: dry run without torch: resolving the pinned packages only (--no-deps)"
    deps=(--no-deps)
  fi
  "$DIR/bin/python" -m pip install --dry-run "${deps[@]}" -r scripts/requirements-reference.txt
  echo "make_refenv: dry run done; nothing installed into $DIR"
  exit 0
fi
"$DIR/bin/python" -m pip install -r scripts/requirements-reference.txt
"$DIR/bin/python" -c 'import torch, transformers, tokenizers, safetensors, torch_optimizer, xxhash
print("make_refenv: torch", torch.__version__, "transformers", transformers.__version__)'
echo "make_refenv: ready; use it as: export REFENV=$DIR; \$REFENV/bin/python scripts/..."
