#!/usr/bin/env bash
# Issue 7 item 4: a long sequence of moves into one gap renumbers the level;
# afterwards the order is exact and every job still answers (moves, cancels).
source "$(dirname "$0")/lib.sh"
start_cq
# 1 TiB each: they fit no node and stay queued.
j1=$(cq submit --hold-for-node --name j1 --ram 1T -- true)
j2=$(cq submit --hold-for-node --name j2 --ram 1T -- true)
j3=$(cq submit --hold-for-node --name j3 --ram 1T -- true)
for i in $(seq 1 25); do
  cq move "$j3" --before "$j2" >/dev/null || fail "move $i of j3 failed"
  cq move "$j1" --before "$j3" >/dev/null || fail "move $i of j1 failed"
done
order=$(cq ls --json | jq -r '[.jobs | sort_by(.position)[] | .name] | join(" ")')
[[ $order == "j1 j3 j2" ]] || fail "the order is '$order', not 'j1 j3 j2'"
pass "50 moves into one gap (renumbering the level) keep the order exact"
out=$(cq move "$j2" --front) || fail "a move after the renumbering failed"
[[ $out == "$j2 is #1 in medium" ]] || fail "cq move said: $out"
for j in "$j1" "$j2" "$j3"; do
  [[ $(cq cancel "$j") == "$j cancelled" ]] || fail "job $j does not answer its cancel"
done
pass "every job of the level still answers moves and cancels"
