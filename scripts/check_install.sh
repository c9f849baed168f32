#!/usr/bin/env bash
# Checks that `cmake --install` gives a usable package: the binary runs, the
# headers and the static library are there, and a program using the public
# API compiles and links through the installed pkg-config file.
#   scripts/check_install.sh [BUILD_DIR]     (default: build)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
prefix=$(mktemp -d /tmp/dedloc-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null
"$prefix/bin/dedloc" --version
for h in util device; do test -f "$prefix/include/dedloc/$h.h"; done
lib=$(find "$prefix" -name libdedloc.a | head -n1)
pc=$(find "$prefix" -name dedloc.pc | head -n1)
test -n "$lib" && test -n "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
test -f "$(pkg-config --variable=includedir dedloc)/dedloc/device.h"

cat > "$prefix/probe.c" <<'C'
#include <dedloc/data.h>
#include <dedloc/device.h>
#include <dedloc/text.h>
#include <dedloc/util.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    char hex[17];
    dl_hash64_hex(dl_hash64("dedloc", 6, 0), hex);
    dl_device_info *infos;
    int count = 0;
    if (dl_device_list(&infos, &count) == 0) free(infos);
    /* The tokenizer and the data stream (file and http(s) sources) link too. */
    dl_tokenizer *tok = NULL;
    if (dl_tokenizer_load_demo(&tok)) return 1;
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = "/nonexistent/dedloc-probe";
    dl_data_stream *stream = NULL;
    if (dl_data_open(&cfg, tok, &stream) == 0) return 1;
    dl_tokenizer_free(tok);
    printf("probe: hash %s, %d OpenCL device(s), data: %s\n", hex, count, dl_error());
    return 0;
}
C
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$prefix/probe.c" -o "$prefix/probe" \
  $(pkg-config --cflags --libs dedloc)
"$prefix/probe"
echo "install: ok ($prefix)"
