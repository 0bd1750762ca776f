#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol (--remote-debugging-pipe)
for tests/integration/test_status_page.sh.

    cdp_page.py URL OUT_DIR READY_JS TOUCH_FILE CHANGED_JS TIMEOUT_S

Opens URL once; waits until the expression READY_JS is true in the page;
marks the document (a reload would lose the mark); saves OUT_DIR/before.html
and OUT_DIR/status-page.png; creates TOUCH_FILE (the test ends a job on it);
waits until CHANGED_JS is true; checks the mark is still there (the page
changed without a reload); saves OUT_DIR/after.html. Exit 0 on success, 1
with the reason on stderr otherwise.
"""
import atexit
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

url, out, ready_js, touch, changed_js, timeout = sys.argv[1:7]
deadline = time.time() + float(timeout)
r_to_chrome, w_to_chrome = os.pipe()
r_from_chrome, w_from_chrome = os.pipe()


def child_fds():
    os.dup2(r_to_chrome, 3)
    os.dup2(w_from_chrome, 4)


profile = tempfile.mkdtemp(prefix="cq-chromium-")
browser = subprocess.Popen(
    ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
     "--remote-debugging-pipe", "--user-data-dir=" + profile, "--window-size=1100,1300",
     "about:blank"],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    close_fds=False, preexec_fn=child_fds)
os.close(r_to_chrome)
os.close(w_from_chrome)


@atexit.register
def end_browser():
    """Ends what this script started, on every way out: the browser, then
    its profile folder."""
    if browser.poll() is None:
        browser.kill()
        browser.wait()
    shutil.rmtree(profile, ignore_errors=True)


inbox = b""
next_id = 0


def die(why):
    sys.stderr.write("cdp_page: " + why + "\n")
    browser.kill()
    browser.wait()
    sys.exit(1)


def call(method, params=None, session=None):
    global next_id, inbox
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(w_to_chrome, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in inbox:
            if time.time() > deadline:
                die("timed out in " + method)
            chunk = os.read(r_from_chrome, 1 << 20)
            if not chunk:
                die("chromium closed the pipe in " + method)
            inbox += chunk
        raw, inbox = inbox.split(b"\0", 1)
        reply = json.loads(raw)
        if reply.get("id") == next_id:
            if "error" in reply:
                die(method + ": " + json.dumps(reply["error"]))
            return reply.get("result", {})


def evaluate(session, expr):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
    return r.get("result", {}).get("value")


def wait_for(session, expr, what):
    while not evaluate(session, expr):
        if time.time() > deadline:
            die("timed out waiting until " + what + ": " + expr)
        time.sleep(0.2)


target = call("Target.createTarget", {"url": url})["targetId"]
session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
wait_for(session, ready_js, "the page is ready")
evaluate(session, "window.__cqMark = 'same-document'")
with open(os.path.join(out, "before.html"), "w") as f:
    f.write(evaluate(session, "document.documentElement.outerHTML"))
shot = call("Page.captureScreenshot", {"format": "png"}, session)
with open(os.path.join(out, "status-page.png"), "wb") as f:
    f.write(base64.b64decode(shot["data"]))
open(touch, "w").close()
wait_for(session, changed_js, "the page changes")
if evaluate(session, "window.__cqMark") != "same-document":
    die("the page was reloaded")
with open(os.path.join(out, "after.html"), "w") as f:
    f.write(evaluate(session, "document.documentElement.outerHTML"))
try:
    call("Browser.close")
except SystemExit:
    pass
browser.wait(timeout=10)
print("ok")
