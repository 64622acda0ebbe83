#!/usr/bin/env python3
"""Inputs for the transparency-log bench rows (issue 66, FORMAT.md §10), made with PyPI
`cryptography` from the C2SP texts, not by Signet:

  tlog.py proof DIR     a log of 1,000,000 entries, one of them a release's entry; DIR/proof
                        (its tlog-proof: the entry in `extra`, the inclusion path, the checkpoint
                        signed by the log and cosigned by three witnesses) and DIR/policy (all
                        three required).
  tlog.py targets FILE N
                        a staged targets document listing N synthetic releases, for `signet log
                        append` to log in one batch.

Keys come from fixed seeds: every run makes the same bytes."""
import base64
import hashlib
import json
import os
import struct
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def key(seed):
    private = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    return private, private.public_key().public_bytes_raw()


def key_hash(name, kind, public):
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public).digest()[:4]


def vkey(name, kind, public):
    return f"{name}+{key_hash(name, kind, public).hex()}+{base64.b64encode(bytes([kind]) + public).decode()}"


def leaf(entry):
    return hashlib.sha256(b"\x00" + entry).digest()


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def entry(name, version, sequence, manifest, target, length):
    lines = ["signet.release/v1", f"name {name}", f"version {version}", f"sequence {sequence}", f"manifest-sha256 {manifest}",
             f"target-sha256 {target}", f"target-length {length}"]
    return "".join(line + "\n" for line in lines).encode()


def proof(folder, size=1_000_000, index=765_432):
    release = entry("app", "1.4.2", 142, "ab" * 32, "cd" * 32, 123_456_789)
    levels = [[leaf(release) if i == index else leaf(f"entry {i}".encode()) for i in range(size)]]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])

    def subtree(lo, hi):
        count = hi - lo
        if count & (count - 1) == 0:
            k = count.bit_length() - 1
            return levels[k][lo >> k]
        split = 1 << ((count - 1).bit_length() - 1)
        return node(subtree(lo, lo + split), subtree(lo + split, hi))

    def path(m, lo, hi):
        n = hi - lo
        if n <= 1:
            return []
        k = 1 << ((n - 1).bit_length() - 1)
        return path(m, lo, lo + k) + [subtree(lo + k, hi)] if m < k else path(m - k, lo + k, hi) + [subtree(lo, lo + k)]

    origin = "example.com/bench-log"
    text = f"{origin}\n{size}\n{base64.b64encode(subtree(0, size)).decode()}\n".encode()
    log, log_public = key(0x42)
    lines = [f"— {origin} " + base64.b64encode(key_hash(origin, 1, log_public) + log.sign(text)).decode()]
    policy = [f"log {vkey(origin, 1, log_public)}"]
    for number in (1, 2, 3):
        name = f"w{number}.example"
        witness, public = key(0x50 + number)
        stamp = 1_700_000_000 + number
        message = b"cosignature/v1\ntime " + str(stamp).encode() + b"\n" + text
        signature = key_hash(name, 4, public) + struct.pack(">Q", stamp) + witness.sign(message)
        lines.append(f"— {name} " + base64.b64encode(signature).decode())
        policy.append(f"witness w{number} {vkey(name, 4, public)}")
    policy += ["group all-three all w1 w2 w3", "quorum all-three"]
    note = text + b"\n" + "".join(line + "\n" for line in lines).encode()
    head = ["c2sp.org/tlog-proof@v1", "extra " + base64.b64encode(release).decode(), f"index {index}"]
    head += [base64.b64encode(h).decode() for h in path(index, 0, size)]
    os.makedirs(folder, exist_ok=True)
    with open(f"{folder}/proof", "wb") as f:
        f.write(("\n".join(head) + "\n\n").encode() + note)
    with open(f"{folder}/policy", "w") as f:
        f.write("\n".join(policy) + "\n")


def targets(path, count):
    members = {}
    for i in range(count):
        digest = hashlib.sha256(f"package {i}".encode()).hexdigest()
        members[f"app-{i}.zip"] = {"length": 1000 + i, "hashes": {"sha256": digest}, "custom": {"signet": {
            "name": "app", "version": f"1.{i}", "sequence": i + 1, "manifest_sha256": hashlib.sha256(f"manifest {i}".encode()).hexdigest(),
            "channels": ["stable"] if i == count - 1 else []}}}
    document = {"signatures": [], "signed": {"_type": "targets", "spec_version": "1.0.31", "version": 2,
                                             "expires": "2036-01-01T00:00:00Z", "targets": members}}
    with open(path, "w") as f:
        json.dump(document, f, sort_keys=True, separators=(",", ":"))


if __name__ == "__main__":
    if sys.argv[1] == "proof":
        proof(sys.argv[2])
    else:
        targets(sys.argv[2], int(sys.argv[3]))
