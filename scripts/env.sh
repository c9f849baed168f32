# Sourced by the scripts: caches that survive between runs on one machine, so
# a warm run compiles no kernel twice (PoCL's own cache and our program cache).
export DEDLOC_CACHE_DIR=${DEDLOC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dedloc}
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$DEDLOC_CACHE_DIR/pocl}
mkdir -p "$DEDLOC_CACHE_DIR" "$POCL_CACHE_DIR"
