"""Checks (and makes) c2sp.org/tlog-cosignature Ed25519 cosignatures from the specification's
text alone, with PyPI cryptography, for TransparencyTests.

  cosignature_check.py verify VKEY NOTE_FILE   exit 0 when VKEY (type 0x04) cosigned the note
  cosignature_check.py sign PEM NAME TIME NOTE_FILE   prints the note with a cosignature added
"""
import base64
import hashlib
import struct
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

action = sys.argv[1]
if action == "verify":
    name, keyhash, blob = sys.argv[2].split("+", 2)
    raw = base64.b64decode(blob)
    assert raw[0] == 0x04 and len(raw) == 33
    key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4]
    assert key_id.hex() == keyhash
    note = open(sys.argv[3], "rb").read()
    split = note.rindex(b"\n\n")
    text, lines = note[: split + 1], note[split + 2 :].decode().splitlines()
    for line in lines:
        signer, b64 = line[2:].split(" ", 1)
        sig = base64.b64decode(b64)
        if signer != name or sig[:4] != key_id:
            continue
        (time,) = struct.unpack(">Q", sig[4:12])
        message = b"cosignature/v1\ntime %d\n" % time + text
        Ed25519PublicKey.from_public_bytes(raw[1:]).verify(sig[12:], message)
        print(time)
        sys.exit(0)
    sys.exit("no cosignature by " + name)
elif action == "sign":
    key = serialization.load_pem_private_key(open(sys.argv[2], "rb").read(), None)
    name, time = sys.argv[3], int(sys.argv[4])
    note = open(sys.argv[5], "rb").read()
    split = note.rindex(b"\n\n")
    text = note[: split + 1]
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_id = hashlib.sha256(name.encode() + b"\n\x04" + public).digest()[:4]
    signature = key.sign(b"cosignature/v1\ntime %d\n" % time + text)
    line = "— " + name + " " + base64.b64encode(key_id + struct.pack(">Q", time) + signature).decode() + "\n"
    sys.stdout.buffer.write(note + line.encode())
