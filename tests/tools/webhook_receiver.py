#!/usr/bin/env python3
"""A webhook receiver for tests/integration/test_notify.sh.

    webhook_receiver.py PORT_FILE LOG FAIL_FLAG

Listens on 127.0.0.1 (a free port, written to PORT_FILE once listening) and
appends each POST's body to LOG, one line per delivery. While the file
FAIL_FLAG exists it answers 500 and logs nothing: a receiver that is down.
"""
import http.server
import os
import sys
import threading

port_file, log, fail_flag = sys.argv[1:4]
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if os.path.exists(fail_flag):
            self.send_response(500)
            self.end_headers()
            return
        with lock, open(log, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
