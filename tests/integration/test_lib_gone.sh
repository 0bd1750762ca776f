#!/usr/bin/env bash
# The helper `gone` (lib.sh) that tests use before restarting a daemon on
# its state dir: a process whose main thread has exited while another
# thread still runs is not gone, for it still holds its files. (A restart
# after kill -9 found the coordinator's state-dir lock still taken: the main
# thread was a zombie, another thread was still exiting.)
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
lock=$work/lock
# The main thread takes a lock, starts a thread that runs until a file
# appears (or a minute has passed: it never outlives a failed test), and
# exits alone (pthread_exit): it is a zombie, the thread lives.
python3 - "$lock" <<'PY' &
import ctypes, fcntl, os, sys, threading, time
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX)
def hold():
    end = time.monotonic() + 60
    while not os.path.exists(sys.argv[1] + ".release") and time.monotonic() < end:
        time.sleep(0.05)
threading.Thread(target=hold).start()
ctypes.CDLL(None).pthread_exit(None)
PY
pid=$!
release() { touch "$lock.release"; }
trap 'release; cleanup' EXIT
main_zombie() { [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
wait_until 10 "the main thread has exited" main_zombie "$pid"
! flock -n "$lock" true || fail "the lock is free while the thread lives"
! gone "$pid" || fail "gone says a process whose thread still runs (holding a lock) is gone"
pass "a zombie main thread with a live thread is not gone"
release
wait_until 10 "the process is gone" gone "$pid"
flock -n "$lock" true || fail "gone, but the lock is still held"
wait "$pid" || true
pass "once its last thread has exited it is gone, and its lock is free"
