"""Hostile varlink clients for ServiceCLITests.hostile: each case on a connection of its own,
raw bytes on the socket, and what the service did with them — its reply, or whether it ended
the connection — as one JSON line per case. The last line: a well-formed Status afterwards.

  varlink_hostile.py SOCKET
"""

import json
import socket
import sys

path = sys.argv[1]


def exchange(payload, wait=5.0):
    """Sends payload; returns ("reply", message) for a NUL-ended reply, ("closed", bytes)
    when the service ended the connection first, ("silent", bytes) when it said nothing."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(wait)
    s.connect(path)
    try:
        s.sendall(payload)
    except OSError:
        pass
    received = b""
    try:
        while b"\0" not in received:
            chunk = s.recv(65536)
            if not chunk:
                s.close()
                return ("closed", received)
            received += chunk
    except socket.timeout:
        s.close()
        return ("silent", received)
    except OSError:
        s.close()
        return ("closed", received)
    s.close()
    return ("reply", json.loads(received.split(b"\0")[0]))


def call(method, parameters=None, **flags):
    message = {"method": method}
    if parameters is not None:
        message["parameters"] = parameters
    message.update(flags)
    return json.dumps(message).encode() + b"\0"


cases = {
    "no-nul-over-limit": b"{" + b" " * (70 << 10),
    "not-json": b"this is not json\0",
    "json-array": b"[1, 2, 3]\0",
    "no-method": b"{\"parameters\": {}}\0",
    "method-number": b"{\"method\": 42}\0",
    "parameters-array": b"{\"method\": \"io.signet.Update.Status\", \"parameters\": [1]}\0",
    "more-number": b"{\"method\": \"io.signet.Update.Status\", \"more\": 1}\0",
    "deep-nesting": b"{\"method\": \"io.signet.Update.Status\", \"parameters\": {\"x\": " + b"[" * 30000 + b"]" * 30000 + b"}}\0",
    "invalid-utf8": b"{\"method\": \"io.signet.Update.\xff\xfe\"}\0",
    "nul-first": b"\0",
    "unknown-method": call("io.signet.Update.Format"),
    "unknown-interface": call("org.example.Nothing.Ping"),
    "no-interface": call("Status"),
    "description-of-unknown": call("org.varlink.service.GetInterfaceDescription", {"interface": "org.example.x"}),
    "description-without-parameter": call("org.varlink.service.GetInterfaceDescription", {}),
    "hash-not-hex": call("io.signet.Update.Install", {"requireManifestSha256": "z" * 64}),
    "hash-number": call("io.signet.Update.Install", {"requireManifestSha256": 12}),
    "hash-uppercase-long": call("io.signet.Update.Install", {"requireManifestSha256": "A" * 65}),
    "hash-fullwidth": call("io.signet.Update.Install", {"requireManifestSha256": "\uff10" * 64}),
    "oneway-status": call("io.signet.Update.Status", oneway=True),
    "huge-number": b"{\"method\": \"io.signet.Update.Status\", \"parameters\": {\"n\": 1e999999}}\0",
}
for name, payload in cases.items():
    kind, detail = exchange(payload, wait=2.0 if name == "oneway-status" else 5.0)
    print(json.dumps({"case": name, "kind": kind, "reply": detail if kind == "reply" else None}), flush=True)

# Several calls in one write: each answered, in order.
s = socket.socket(socket.AF_UNIX)
s.connect(path)
s.sendall(call("org.varlink.service.GetInfo") + call("io.signet.Update.Status") + call("org.varlink.service.GetInfo"))
received = b""
while received.count(b"\0") < 3:
    chunk = s.recv(65536)
    if not chunk:
        break
    received += chunk
s.close()
replies = [json.loads(part) for part in received.split(b"\0") if part]
print(json.dumps({"case": "pipelined", "kind": "replies", "reply": [sorted(r.get("parameters", {}).keys()) for r in replies]}), flush=True)
print(json.dumps({"case": "after", "kind": exchange(call("io.signet.Update.Status"))[0]}), flush=True)
