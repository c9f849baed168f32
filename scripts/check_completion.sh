#!/usr/bin/env bash
# Checks that the bash completion (scripts/dedloc-completion.bash) and the man
# page (docs/dedloc.1) keep up with the binary: the completion, run as bash
# runs it, offers every command of `dedloc --help`, every bench sub-command,
# and for each command every option its --help names (usage line and option
# lines); the man page has a section for every command. On a mismatch:
# scripts/make_completion.sh build/dedloc > scripts/dedloc-completion.bash
#   scripts/check_completion.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/dedloc}")
completion=scripts/dedloc-completion.bash
manpage=docs/dedloc.1
fail=0

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
    if ! grep -qxF -- "$w" <<<"$offered"; then
      echo "completion: '$what' does not offer $w" >&2
      fail=1
    fi
  done
}

commands=$("$bin" --help | sed -n '/^commands:/,/^$/p' | grep -E '^  [a-z]' | awk '{print $1}')
test -n "$commands"
# shellcheck disable=SC2086
expect_all "dedloc <TAB>" "$(complete_words dedloc '')" $commands
offered=$(complete_words dedloc tr)
[ "$offered" = train ] || { echo "completion: 'dedloc tr' gives '$offered', not train" >&2; fail=1; }

for c in $commands; do
  if [ "$c" = bench ]; then
    subs=$("$bin" bench --help | grep -E '^  [a-z]' | awk '{print $1}')
    # shellcheck disable=SC2086
    expect_all "dedloc bench <TAB>" "$(complete_words dedloc bench '')" $subs
    keys=$(for s in $subs; do echo "bench $s"; done)
  else
    keys=$c
  fi
  while read -r key; do
    # shellcheck disable=SC2086
    opts=$("$bin" $key --help | sed '/^testing aids/,/^$/d' | grep -E '^(usage:|[[:space:]]*--)' | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u)
    # shellcheck disable=SC2086
    expect_all "dedloc $key --" "$(complete_words dedloc $key --)" $opts --help
  done <<<"$keys"
  if ! grep -qE "^\.SS \"?$c( |\"|$)" "$manpage"; then
    echo "man page: no section for the command $c" >&2
    fail=1
  fi
done
if [ "$fail" != 0 ]; then
  echo "regenerate: scripts/make_completion.sh build/dedloc > $completion (and update $manpage)" >&2
  exit 1
fi
echo "completion and man page: every command and option present"
