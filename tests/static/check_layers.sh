#!/usr/bin/env bash
# Checks that the modules of src/ depend downwards only, as README.md
# ("Layout") states, and that the files of src/net keep the layer order
# written at the top of src/net/net_internal.h.
#
#   check_layers.sh SOURCE_DIR [BUILD_DIR]
#
# Modules: every #include "..." in src/<module>/*.c and *.h is read.
# include/dedloc/<m>.h counts as module m (batch.h belongs to util); a
# private header <m>/<file>.h may be included from src/<m>/ only. A module
# may include the modules its arrows reach, directly or through others.
#
# src/net: no file of layers 0 to 3 includes net/above_conn.h, and, when
# BUILD_DIR holds the library's object files, each file's undefined symbols
# that another src/net object defines come from a lower layer (nm).
#
# Exit status: 0 when everything holds, 1 with one line per breach.
set -u

src=${1:?usage: check_layers.sh SOURCE_DIR [BUILD_DIR]}
build=${2:-}

# The arrows between modules (README.md, "Layout"): module -> the modules it
# may use directly. "*" is every module. A module whose folder does not exist
# (yet) is skipped; a folder without a rule here is a breach.
declare -A arrows=(
    [cli]="*"
    [monitor]="collab net train model util"
    [collab]="net train model util"
    [net]="util"
    [train]="model data safetensors util"
    [model]="device safetensors util"
    [data]="text util"
    [text]="util"
    [device]="util"
    [safetensors]="util"
    [util]=""
)

# Includes that break the rules today, each with why it is tolerated. An
# entry that no longer matches anything is reported (and then belongs out).
declare -A known=(
    ["src/cli/allreduce_member.c collab/collab_internal.h"]="the allreduce bench member drives the round's internals"
    ["src/cli/allreduce_member.c collab/round_async.h"]="the allreduce bench member drives the round's internals"
    ["src/cli/allreduce_member.c collab/wirecodec.h"]="the allreduce bench member drives the round's internals"
)

breaches=0
breach() {
    echo "layers: $*"
    breaches=$((breaches + 1))
}

# The modules module $1 reaches through its arrows, itself included.
declare -A reach
reachable() {
    local start=$1 todo=$1 seen=" $1 " m next
    while [ -n "$todo" ]; do
        m=${todo%% *}
        [ "$todo" = "$m" ] && todo="" || todo=${todo#* }
        for next in ${arrows[$m]:-}; do
            case "$seen" in *" $next "*) ;; *) seen="$seen$next "; todo="${todo:+$todo }$next" ;; esac
        done
    done
    reach[$start]=$seen
}

declare -A used_known
for dir in "$src"/src/*/; do
    module=$(basename "$dir")
    if [ -z "${arrows[$module]+set}" ]; then
        breach "src/$module/ has no rule: add its arrows to tests/static/check_layers.sh and README.md"
        continue
    fi
    reachable "$module"
    for file in "$dir"*.c "$dir"*.h; do
        [ -e "$file" ] || continue
        rel=${file#"$src"/}
        while IFS= read -r inc; do
            case "$inc" in
                dedloc/batch.h) target=util ;;
                dedloc/*.h) target=${inc#dedloc/}; target=${target%.h} ;;
                */*) target=${inc%%/*} ;;
                *) continue ;; # a header beside the file, or a generated one
            esac
            if [ "$module" = "$target" ]; then continue; fi
            why=""
            if [ "${inc#dedloc/}" = "$inc" ] && [ -d "$src/src/$target" ]; then
                why="private header of src/$target/"
            elif [ "${arrows[$module]}" != "*" ]; then
                case "${reach[$module]}" in *" $target "*) ;; *) why="$module may not use $target" ;; esac
            fi
            [ -z "$why" ] && continue
            if [ -n "${known["$rel $inc"]+set}" ]; then
                used_known["$rel $inc"]=1
                continue
            fi
            breach "$rel includes $inc: $why"
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
    done
done
for entry in "${!known[@]}"; do
    [ -n "${used_known[$entry]+set}" ] || echo "layers: note: the tolerated include '$entry' is gone; remove it from the list"
done

# ---- src/net: the layer table of net_internal.h ---------------------------------
header="$src/src/net/net_internal.h"
declare -A layer
if [ -f "$header" ]; then
    # Lines " *   N  a.c b.c ..." open layer N; lines " *      c.c d.c" continue
    # it. Only the leading run of *.c names counts (the rest is prose).
    while read -r n names; do
        for f in $names; do layer[$f]=$n; done
    done < <(awk '
        /^ \* +[0-9] +[a-z_]+\.c/ { n = $2; start = 3 }
        /^ \*      +[a-z_]+\.c/ && !/^ \* +[0-9] / { start = 2 }
        /^ \* +([0-9] +)?[a-z_]+\.c/ {
            out = ""
            for (i = start; i <= NF && $i ~ /^[a-z_]+\.c$/; i++) out = out " " $i
            print n, out
        }' "$header")
    if [ ${#layer[@]} -eq 0 ]; then
        breach "no layer table found at the top of src/net/net_internal.h"
    fi
    for file in "$src"/src/net/*.c; do
        f=$(basename "$file")
        if [ -z "${layer[$f]+set}" ]; then
            breach "src/net/$f is in no layer of src/net/net_internal.h"
            continue
        fi
        if [ "${layer[$f]}" -le 3 ] && grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*"net/above_conn.h"' "$file"; then
            breach "src/net/$f (layer ${layer[$f]}) includes net/above_conn.h, the files above conn.c"
        fi
    done

    objdir="$build/CMakeFiles/dedloc_lib.dir/src/net"
    if [ -z "$build" ] || ! ls "$objdir"/*.c.o > /dev/null 2>&1; then
        echo "layers: note: no object files under ${objdir}; the symbol check of src/net is skipped"
    elif ! command -v nm > /dev/null; then
        echo "layers: note: nm not found; the symbol check of src/net is skipped"
    else
        declare -A owner
        for obj in "$objdir"/*.c.o; do
            f=$(basename "$obj" .o)
            [ -e "$src/src/net/$f" ] || continue # an object left from a removed file
            while read -r sym; do owner[$sym]=$f; done < <(nm --defined-only -g "$obj" | awk '{print $3}')
        done
        for obj in "$objdir"/*.c.o; do
            f=$(basename "$obj" .o)
            [ -n "${layer[$f]+set}" ] || continue
            while read -r sym; do
                g=${owner[$sym]:-}
                [ -n "$g" ] && [ -n "${layer[$g]+set}" ] || continue
                if [ "${layer[$g]}" -ge "${layer[$f]}" ]; then
                    breach "src/net/$f (layer ${layer[$f]}) calls $sym of $g (layer ${layer[$g]})"
                fi
            done < <(nm -u "$obj" | awk '{print $2}' | sort -u)
        done
    fi
fi

if [ "$breaches" -gt 0 ]; then
    echo "layers: $breaches breach(es) of the arrows in README.md (Layout) or src/net/net_internal.h"
    exit 1
fi
echo "layers: every include and src/net call goes downwards"
