#!/usr/bin/env bash
# Checks the bash completion and the man page (docs/dedloc.1) against the
# option tables the commands parse with, as `dedloc completion options`
# lists them: the completion, run as bash runs it, offers every command,
# every bench benchmark and every option of each; the man page has a
# section per command that names every option of the command's table and
# no option the table lacks (a line that names another command, "dedloc
# train --resume", refers to that command's option); and every parser in
# src/cli goes through cli_getopt_long, so that no table escapes the lists.
# With the completion file the build wrote, also that it is current.
#   scripts/check_completion.sh [BINARY [COMPLETION_FILE]]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/dedloc}")
built=${2:-}
manpage=docs/dedloc.1
fail=0
complain() { echo "$*" >&2; fail=1; }

completion=$(mktemp)
trap 'rm -f "$completion"' EXIT
"$bin" completion bash >"$completion"
lists=$("$bin" completion options)
if [ -n "$built" ] && ! cmp -s "$built" "$completion"; then
  complain "completion: $built differs from 'dedloc completion bash' (rebuild)"
fi

# What bash would offer for the words given (the last one is being completed).
complete_words() {
  bash -c '
    . "$0"
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    _dedloc
    printf "%s\n" "${COMPREPLY[@]}"' "$completion" "$@"
}

expect_all() { # what, offered words, expected words...
  local what=$1 offered=$2
  shift 2
  for w in "$@"; do
    grep -qxF -- "$w" <<<"$offered" || complain "completion: '$what' does not offer $w"
  done
}

commands=$("$bin" --help | sed -n '/^commands:/,/^$/p' | grep -E '^  [a-z]' | awk '{print $1}')
test -n "$commands"
# shellcheck disable=SC2086
expect_all "dedloc <TAB>" "$(complete_words dedloc '')" $commands --version
offered=$(complete_words dedloc tr)
[ "$offered" = train ] || complain "completion: 'dedloc tr' gives '$offered', not train"
subs=$("$bin" bench --help | grep -E '^  [a-z]' | awk '{print $1}')
# shellcheck disable=SC2086
expect_all "dedloc bench <TAB>" "$(complete_words dedloc bench '')" $subs
for c in $commands; do
  grep -q "^$c" <<<"$lists" || complain "completion: no option list for the command $c"
done

# The options named in the man page's section of a command, lines that
# name another command left out.
others_re() { grep -vxF "$1" <<<"$commands" | paste -sd'|'; }
man_options() {
  awk -v c="$1" '/^\.SS /{s=$2; gsub(/"/, "", s); on = s == c; next} /^\.SH /{on = 0} on' "$manpage" |
    grep -vE "dedloc ($(others_re "$1"))([^a-z-]|$)" | grep -oE '\\-\\-[a-z0-9]+(\\-[a-z0-9]+)*' | sed 's/\\-/-/g' | sort -u || true
}

declare -A table_of
while IFS= read -r line; do
  key=${line%%:*}
  opts=${line#*: }
  # shellcheck disable=SC2086
  expect_all "dedloc $key --" "$(complete_words dedloc $key --)" $opts
  cmd=${key%% *}
  table_of[$cmd]+=" $opts"
done <<<"$lists"

for c in $commands; do
  if ! grep -qE "^\.SS \"?$c( |\"|$)" "$manpage"; then
    complain "man page: no section for the command $c"
    continue
  fi
  documented=$(man_options "$c")
  table=$(tr ' ' '\n' <<<"${table_of[$c]}" | grep -v '^$' | sort -u || true)
  for o in $table; do
    [ "$o" = --help ] && continue
    grep -qxF -- "$o" <<<"$documented" || complain "man page: the section $c does not name $o"
  done
  for o in $documented; do
    grep -qxF -- "$o" <<<"$table" || complain "man page: the section $c names $o, which dedloc $c does not take"
  done
done

# A parser that calls getopt_long itself would be missing from the lists.
if direct=$(grep -n 'getopt_long(' src/cli/*.c | grep -v 'cli_getopt_long(' | grep -v '^src/cli/opt_table.c:'); then
  complain "these parse without cli_getopt_long (prefixes accepted, options missing from completion): $direct"
fi

if [ "$fail" != 0 ]; then
  echo "the lists: $bin completion options; document what is missing in $manpage" >&2
  exit 1
fi
echo "completion and man page: every command and option present, none extra"
