#!/usr/bin/env bash
# Output a person can read at 80 columns: every program's --help, and every
# cq command's and subcommand's, wraps its descriptions (cq/help_format.hpp),
# and still names every option.
source "$(dirname "$0")/lib.sh"
checked=0
# check_help CMD...: CMD --help exits 0 and has no line over 80 columns.
check_help() {
  local out
  out=$("$@" --help 2>&1) || fail "$* --help exited $?"
  local long
  long=$(awk 'length > 80' <<<"$out")
  [[ -z $long ]] || fail "$* --help has lines over 80 columns:"$'\n'"$long"
  checked=$((checked + 1))
}
# subcommands CMD...: the names CMD --help lists under Subcommands.
subcommands() {
  "$@" --help 2>&1 | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }'
}
# walk CMD...: checks CMD and, recursively, each of its subcommands.
walk() {
  check_help "$@"
  local sub
  for sub in $(subcommands "$@"); do
    walk "$@" "$sub"
  done
}
for p in cq-coordinator cq-node cq-sim; do
  check_help "$p"
done
walk cq
((checked >= 35)) || fail "only $checked help texts were found; the Subcommands list changed?"
# Wrapping keeps every word: a long option's description ends as written.
cq submit --help | tr -s ' \n' ' ' | grep -q "(relative: under the working directory)" ||
  fail "cq submit --help lost the end of --output's description"
pass "$checked help texts fit 80 columns"
