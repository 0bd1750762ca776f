#!/usr/bin/env bash
# Acceptance 5: the README's quick-start command runs to the sample job's success.
source "$(dirname "$0")/lib.sh"
root=$(cd "$here/../.." && pwd)
unset CQ_URL
export CQ_PORT=$port
export CQ_BUILD_DIR=$(cd "$CQ_BIN/.." && pwd)
out=$("$root/deploy/quickstart.sh" 2>&1) || { echo "$out"; fail "quickstart failed"; }
grep -q "hello from cq" <<<"$out" || { echo "$out"; fail "the sample job's output is missing"; }
grep -q succeeded <<<"$out" || { echo "$out"; fail "the sample job did not succeed"; }
pass "quickstart ran the sample job to success"
