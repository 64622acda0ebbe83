"""Hostile HTTP clients for TransparencyCLITests.hostile: each case on a connection of its own,
raw bytes to `signet witness serve`, and the status it answered (or "closed" when it ended the
connection without one), one JSON line per case. Nothing waits on the server's 10 s read limit:
every case sends all it will send and half-closes.

  witness_hostile.py PORT LOG.pem

The last case is a well-formed request (the empty log's checkpoint, signed with LOG.pem for
example.com/app-log by PyPI cryptography): the witness must still cosign after the others.
"""

import base64
import hashlib
import json
import socket
import sys

from cryptography.hazmat.primitives.serialization import load_pem_private_key

port = int(sys.argv[1])


def exchange(payload):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    received = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            received += chunk
    except OSError:
        pass
    s.close()
    if not received.startswith(b"HTTP/1.1 "):
        return "closed"
    return int(received[9:12])


def post(body, extra=b"", path=b"/add-checkpoint", length=None):
    head = b"POST " + path + b" HTTP/1.1\r\nHost: w\r\n" + extra
    if length is not False:
        head += b"Content-Length: " + str(len(body) if length is None else length).encode() + b"\r\n"
    return head + b"\r\n" + body


cases = {
    "get": b"GET /add-checkpoint HTTP/1.1\r\nHost: w\r\n\r\n",
    "other path": post(b"old 0\n\n", path=b"/checkpoint"),
    "not http": b"\x00\x01\x02 garbage\r\n\r\n",
    "header over 16 KiB": b"POST /add-checkpoint HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
    "no content-length": post(b"old 0\n\n", length=False),
    "chunked": post(b"", extra=b"Transfer-Encoding: chunked\r\n", length=False) + b"0\r\n\r\n",
    "two content-lengths": post(b"old 0\n\n", extra=b"Content-Length: 7\r\n"),
    "negative length": post(b"", length=-1),
    "huge length": post(b"", length=10**30),
    "body over 64 KiB": post(b"old 0\n" + b"A" * 70000 + b"\n\n", length=None),
    "short body": post(b"old 0\n\n", length=100),
    "body not a request": post(b"\xff\xfe\n\n\x00"),
    "old with a sign": post(b"old +5\n\nexample.com/app-log\n1\n" + b"A" * 44 + b"\n\n"),
    "unknown log": post(b"old 0\n\nother.example/log\n1\n" + b"A" * 43 + b"=\n\n\xe2\x80\x94 other.example/log AAAA\n"),
    "signature by nobody": post(b"old 0\n\nexample.com/app-log\n1\n" + b"A" * 43 + b"=\n\n\xe2\x80\x94 example.com/app-log AAAAAAAA\n"),
    "empty": b"",
}
for name, payload in cases.items():
    print(json.dumps({"case": name, "answer": exchange(payload)}), flush=True)

key = load_pem_private_key(open(sys.argv[2], "rb").read(), password=None)
public = key.public_key().public_bytes_raw()
origin = "example.com/app-log"
text = f"{origin}\n0\n{base64.b64encode(hashlib.sha256(b'').digest()).decode()}\n".encode()
key_hash = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()[:4]
note = text + b"\n" + "\u2014 ".encode() + origin.encode() + b" " + base64.b64encode(key_hash + key.sign(text)) + b"\n"
print(json.dumps({"case": "well-formed", "answer": exchange(post(b"old 0\n\n" + note))}), flush=True)
