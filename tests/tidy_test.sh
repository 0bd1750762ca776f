#!/usr/bin/env bash
# tests/tidy.sh has teeth: on a copy of the tree it passes, then fails on a
# forbidden call placed in each kind of folder outside the adapters, and on
# an exception whose file no longer makes such calls.
set -u
src=${1:?source root}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for d in actors bus coordinator node cli sim bench tests; do
  cp -r "$src/$d" "$tmp/$d"
done
fail() { echo "FAIL: $*"; exit 1; }

"$src/tests/tidy.sh" "$tmp" >/dev/null || fail "tidy fails on the tree itself"

scratch() { # path line
  mkdir -p "$(dirname "$tmp/$1")"
  printf '%s\n' "$2" >"$tmp/$1"
  if out=$("$src/tests/tidy.sh" "$tmp"); then
    fail "tidy passes with '$2' in $1"
  fi
  grep -q "$1" <<<"$out" || fail "tidy does not name $1: $out"
  rm "$tmp/$1"
}
scratch coordinator/scratch.cpp 'void f() { std::this_thread::sleep_for(std::chrono::seconds(1)); }'
scratch coordinator/policy/scratch.cpp 'auto t = std::chrono::system_clock::now();'
scratch actors/include/cq/scratch.hpp 'inline int r() { return std::random_device{}(); }'
scratch node/actors/scratch.cpp 'void f() { ::fork(); }'
scratch node/policy/scratch.cpp 'void f(int p) { ::killpg(p, 9); }'
scratch node/src/scratch.cpp 'void f(int p) { ::kill(p, 9); }'
scratch sim/scratch.cpp 'void f(void* s) { zmq_send(s, 0, 0, 0); }'
scratch cli/src/scratch.cpp 'std::ifstream in("/proc/meminfo");'
"$src/tests/tidy.sh" "$tmp" >/dev/null || fail "tidy fails after the scratch files are gone"

# A stale exception: an excepted file that makes no such call any more.
printf '// nothing here\n' >"$tmp/sim/main.cpp"
out=$("$src/tests/tidy.sh" "$tmp") && fail "tidy passes with a stale exception"
grep -q "stale exception.*sim/main.cpp" <<<"$out" || fail "stale entry not named: $out"
echo "tidy has teeth: 10 checks passed"
