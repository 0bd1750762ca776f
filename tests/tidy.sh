#!/usr/bin/env bash
# Fails when a nondeterministic call appears outside its adapter folder
# (CONVENTIONS.md: one seam for everything nondeterministic).
set -u
root=${1:-.}
cd "$root" || exit 2
# Adapters: the wire (bus/src), the node daemon (its own process), the CLI,
# the coordinator's main and auth (randomness).
hits=$(grep -rnE 'system_clock::now|steady_clock::now|sleep_for|[^_a-z]rand\(|random_device|[^a-z_]zmq_(send|recv|socket|ctx_new|bind|connect|poll|setsockopt|msg_[a-z]+)\(|[^a-z_]fork\(|[^a-z_]exec[lv]p?\(' \
  --include='*.cpp' --include='*.hpp' actors coordinator 2>/dev/null |
  grep -vE '^coordinator/(main\.cpp|auth/)' || true)
if [[ -n $hits ]]; then
  echo "nondeterministic calls outside their adapters:"
  echo "$hits"
  exit 1
fi
echo "1 passed, 0 failed"
