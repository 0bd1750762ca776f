#!/usr/bin/env bash
# The launchd plist of a Mac node parses and says what cq-node install
# relies on: the program and its state dir, run at load, kept alive, jobs
# left running when the daemon exits, and where its log goes.
set -euo pipefail
plist=$(cd "$(dirname "$0")/../.." && pwd)/deploy/launchd/org.cq.node.plist
command -v python3 >/dev/null || { echo "skip: no python3 (deploy/install-deps.sh installs it)"; exit 77; }
python3 - "$plist" <<'PY'
import plistlib, sys
with open(sys.argv[1], "rb") as f:
    d = plistlib.load(f)
def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}: {d}")
check(d["Label"] == "org.cq.node", "Label")
check(d["ProgramArguments"] == ["/usr/local/bin/cq-node", "--state", "/usr/local/var/cq-node"],
      "ProgramArguments")
check(d["RunAtLoad"] is True, "RunAtLoad")
check(d["KeepAlive"] is True, "KeepAlive")
check(d["AbandonProcessGroup"] is True, "AbandonProcessGroup (jobs outlive a restart)")
check(d["StandardOutPath"] == d["StandardErrorPath"] == "/usr/local/var/log/cq-node.log", "log paths")
print("ok: org.cq.node.plist parses:", d["ProgramArguments"])
PY
