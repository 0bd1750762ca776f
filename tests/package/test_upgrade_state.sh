#!/usr/bin/env bash
# Issue 18, acceptance 6: an upgrade keeps all state. The state a coordinator
# and a node of an earlier version left in the package's layout
# (tests/fixtures/state-*.tar.gz, made by make_state_fixture.sh and never
# changed) opens with this package's binaries under the units' ExecStart
# lines: the store migrates, the Owner's token still works, finished jobs
# keep their outcomes and logs, the node comes back with its identity, and
# the job left queued runs once the node is enabled. (A node restarted during
# a running job re-adopts it: test_units_run.sh, step 5.)
source "$(dirname "$0")/lib.sh"
needs_root "the node daemon's memory cgroups"
units=$root/usr/lib/systemd/system
fixtures=$(cd "$here_pkg/../fixtures" && pwd)
shopt -s nullglob
states=("$fixtures"/state-*.tar.gz)
shopt -u nullglob
((${#states[@]} > 0)) || fail "no state fixture in $fixtures"

# exec_start UNIT OPTS ROOT: the unit's ExecStart line with the package's
# paths under ROOT and $CQ_*_OPTS given as an EnvironmentFile= would.
exec_start() {
  local line
  line=$(sed -n 's/^ExecStart=//p' "$units/$1")
  line=${line//\/usr\/bin\//$root/usr/bin/}
  line=${line//\/var\/lib\//$3/var/lib/}
  # RuntimeDirectory= (/run/cq-coordinator), as systemd would make it.
  mkdir -p "$3/run/cq-coordinator"
  line=${line//\/run\//$3/run/}
  line=${line//\$CQ_COORDINATOR_OPTS/$2}
  line=${line//\$CQ_NODE_OPTS/$2}
  echo "$line"
}

for fixture in "${states[@]}"; do
  name=$(basename "$fixture" .tar.gz)
  old=$work/$name
  mkdir -p "$old"
  tar -C "$old" -xzf "$fixture"
  written_by=$(jq -r .written_by "$old/manifest.json")
  node=$(jq -r .node "$old/manifest.json")
  done_job=$(jq -r .jobs.done "$old/manifest.json")
  failed_job=$(jq -r .jobs.failed "$old/manifest.json")
  queued_job=$(jq -r .jobs.queued "$old/manifest.json")
  port=$(free_port)
  export CQ_URL=tcp://127.0.0.1:$port
  mkdir -p "$CQ_CONFIG_DIR"
  cp "$old/owner.token" "$CQ_CONFIG_DIR/token"
  chmod 600 "$CQ_CONFIG_DIR/token"

  bash -c "exec $(exec_start cq-coordinator.service "--bind $CQ_URL" "$old")" \
    >>"$work/coordinator.log" 2>&1 &
  echo $! >"$work/coordinator.pid"
  wait_until 20 "the new coordinator serves the old store" cq node ls
  [[ $(job_field "$done_job" state) == succeeded ]] || fail "$name: old-done is not succeeded"
  [[ $(job_field "$failed_job" state) == failed ]] || fail "$name: old-failed is not failed"
  [[ $(cq show "$failed_job" --json | jq -r '.allocations[0].exit_code') == 3 ]] ||
    fail "$name: old-failed lost its exit code"
  [[ $(job_field "$queued_job" state) == queued ]] || fail "$name: old-queued is not queued"
  pass "$name ($written_by): the store opens; the Owner's token works; outcomes kept"

  # The node: its identity from the old node.toml, on this run's port.
  sed -i "s|^endpoint = .*|endpoint = \"$CQ_URL\"|" "$old/var/lib/cq-node/node.toml"
  bash -c "exec $(exec_start cq-node.service "--heartbeat-ms 200" "$old")" >>"$work/node.log" 2>&1 &
  echo $! >"$work/node.pid"
  wait_until 20 "the old node is approved again" grep -qx "approved" "$old/var/lib/cq-node/status"
  cq logs "$done_job" | grep -q written-by-the-old-version || fail "$name: old-done's log is lost"
  cq node enable "$node" >/dev/null
  wait_until 30 "old-queued runs and succeeds" job_state_is "$queued_job" succeeded
  cq logs "$queued_job" | grep -q ran-after-the-upgrade || fail "$name: old-queued's output is lost"
  pass "$name: the node came back with its identity and ran the job left queued"

  for f in node coordinator; do
    kill -TERM "$(cat "$work/$f.pid")"
    wait_until 20 "cq-$f exits" gone "$(cat "$work/$f.pid")"
  done
done
