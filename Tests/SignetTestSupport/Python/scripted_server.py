import http.server, json, os, select, signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
root, plan_path, log_path = sys.argv[1], sys.argv[2], sys.argv[3]
plan = json.load(open(plan_path))
plan_stamp = os.stat(plan_path).st_mtime_ns
counts = {}
def current_plan():
    # A script replaced by the test (ScriptedServer.replace) starts counting anew.
    global plan, plan_stamp, counts
    stamp = os.stat(plan_path).st_mtime_ns
    if stamp != plan_stamp:
        plan, plan_stamp, counts = json.load(open(plan_path)), stamp, {}
    return plan
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def paced(self, body, pauses):
        # Sends body, pausing after each pause's byte count: for its milliseconds, or until
        # the test creates the release file. The marker says a pause was reached; the last
        # line says whether the rest reached a client that was still there.
        # (A pause at or past the body's end is not reached: a short answer passes.)
        pauses = [p for p in pauses if p["after"] < len(body)]
        if not pauses:
            self.wfile.write(body); self.wfile.flush(); return
        for stale in (".paused", ".finished"):
            try: os.remove(log_path + stale)
            except OSError: pass
        sent = 0
        try:
            for p in sorted(pauses, key=lambda p: p["after"]):
                at = p["after"]
                self.wfile.write(body[sent:at]); self.wfile.flush(); sent = at
                open(log_path + ".paused", "w").close()
                if p.get("milliseconds") is not None:
                    time.sleep(p["milliseconds"] / 1000)
                    continue
                for _ in range(12000):
                    if os.path.exists(log_path + ".release"): break
                    time.sleep(0.005)
            # In pieces: a first write to a socket its client closed still succeeds (the
            # kernel takes it), the next fails.
            for at in range(sent, len(body), 16384):
                self.wfile.write(body[at:at + 16384]); self.wfile.flush()
            # A client still reading has nothing to say; one that left has closed its end
            # (readable: an end of file or TLS's close_notify).
            readable, _, _ = select.select([self.connection.fileno()], [], [], 0.05)
            outcome = "disconnected" if readable else "sent"
        except OSError:
            outcome = "disconnected"
            self.close_connection = True
        with open(log_path + ".finishing", "w") as marker: marker.write(outcome)
        os.replace(log_path + ".finishing", log_path + ".finished")
    def several(self, data, ranges, a):
        kind, total, boundary = a.get("parts", "honest"), len(data), "SIGNETTESTBOUNDARY"
        def single(start, end, status=206):
            body = data[start:end + 1]
            self.send_response(status)
            if status == 206: self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, total))
            self.send_header("Content-Length", str(len(body)))
            for k, v in a.get("headers", {}).items(): self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
        if kind == "firstOnly": return single(*ranges[0])
        if kind == "coalesced": return single(ranges[0][0], ranges[-1][1])
        if kind == "whole": return single(0, total - 1, 200)
        if kind == "reversed": ranges = list(reversed(ranges))
        body = b""
        cut_at, cut, reached = a.get("cutAt"), None, 0
        for i, (start, end) in enumerate(ranges):
            shown = (start + 1, end + 1) if kind == "shiftedSecond" and i == 1 else (start, end)
            sent = data[start:end + 2] if kind == "longerSecond" and i == 1 else data[start:end + 1]
            delimiter = "OTHERBOUNDARY" if kind == "wrongBoundary" else boundary
            body += ("\r\n--%s\r\nContent-Type: application/zip\r\nContent-Range: bytes %d-%d/%d\r\n\r\n" % (delimiter, shown[0], shown[1], total)).encode()
            # (A stall waits at the first part that reaches the offset, if it falls between parts.)
            if cut is None and cut_at is not None and (start <= cut_at or a.get("stall")) and cut_at <= end:
                cut = len(body) + max(cut_at, start) - start
                if cut_at > start: reached = cut_at
            if cut is None: reached = end + 1
            body += sent
        if kind != "unclosed": body += ("\r\n--%s--\r\n" % boundary).encode()
        if kind == "endlessEpilogue": body += b"x" * 65536
        self.send_response(206)
        self.send_header("Content-Type", "multipart/byteranges; boundary=" + boundary)
        self.send_header("Content-Length", str(len(body)))
        for k, v in a.get("headers", {}).items(): self.send_header(k, v)
        self.end_headers()
        if cut is None: self.paced(body, a.get("pauses", []))
        else: self.wfile.write(body[:cut])
        if cut is not None and a.get("stall"):
            # Stalled inside a part: the client waits, holding what arrived, for the
            # test to interrupt it (told by the marker file, not by the clock).
            self.wfile.flush()
            # The marker holds where, in the file, the last part's bytes sent end.
            with open(log_path + ".stalling", "w") as marker: marker.write(str(reached))
            os.replace(log_path + ".stalling", log_path + ".stalled")
            time.sleep(60)
        if cut is not None:
            # The link drops inside a part, as for a single range.
            self.wfile.flush()
            self.close_connection = True
            try: self.connection.shutdown(socket.SHUT_RDWR)
            except OSError: pass
    def do_GET(self):
        path = self.path.lstrip("/")
        with open(log_path, "a") as log:
            log.write("%s %s\n" % (path, self.headers.get("Range", "-")))
        with open(log_path + ".encodings", "a") as log:
            log.write("%s\n" % self.headers.get("Accept-Encoding", "-"))
        try:
            data = open(os.path.join(root, path), "rb").read()
        except OSError:
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        answers = current_plan().get(path, [{"status": 200, "from": 0, "headers": {}}])
        n = counts.get(path, 0); counts[path] = n + 1
        a = answers[min(n, len(answers) - 1)]
        wanted = self.headers.get("Range")
        # If-Range (RFC 9110 §13.1.5): a validator other than the answer's ETag asks for the
        # whole file, as a server does when the file changed.
        if_range = self.headers.get("If-Range")
        if wanted and if_range is not None and if_range != a.get("headers", {}).get("ETag"):
            wanted = None
        if a.get("honourRange") and wanted and wanted.startswith("bytes=") and "," in wanted:
            self.several(data, [tuple(int(x) for x in r.split("-")) for r in wanted[6:].split(",")], a)
            return
        if a.get("honourRange") and wanted and wanted.startswith("bytes="):
            first, last = wanted[6:].split("-")
            if first == "" and a.get("suffixFromStart"):
                start, end = 0, len(data) - 1
            elif first == "":
                start, end = max(0, len(data) - int(last)), len(data) - 1
            else:
                start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            shift = a.get("shiftRange", 0)
            body = data[start:end + 1] + b"X" * a.get("extraBytes", 0)
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start + shift, end + shift, len(data)))
            self.send_header("Content-Length", str(len(body)))
            for k, v in a.get("headers", {}).items(): self.send_header(k, v)
            self.end_headers()
            cut_at = a.get("cutAt")
            if cut_at is not None and start <= cut_at <= end:
                self.wfile.write(body[:cut_at - start])
                self.wfile.flush()
                if a.get("stall"):
                    time.sleep(60)
                self.close_connection = True
                try: self.connection.shutdown(socket.SHUT_RDWR)
                except OSError: pass
                return
            self.paced(body, a.get("pauses", []))
            return
        body = data[a.get("from", 0):a.get("to") if a.get("to") is not None else len(data)]
        self.send_response(a["status"])
        self.send_header("Content-Length", str(a["length"] if a.get("length") is not None else len(body)))
        for k, v in a.get("headers", {}).items(): self.send_header(k, v)
        cut = a.get("cutAfter")
        if cut is not None: self.send_header("Connection", "close")
        self.end_headers()
        self.paced(body if cut is None else body[:cut], a.get("pauses", []))
        if cut is not None:
            self.close_connection = True
            try: self.connection.shutdown(socket.SHUT_RDWR)
            except OSError: pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
if len(sys.argv) > 5:
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[4], sys.argv[5])
    s.socket = context.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
