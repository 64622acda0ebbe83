"""python-tuf and securesystemslib on the other side of Signet's TUF tests (issue 37).

  keys DIR                      RSA root and targets keys, an ECDSA timestamp key, an Ed25519
                                snapshot key and an RSA key for a delegated role, as PEM files.
  pyrepo DIR PACKAGE CHANNEL NAME VERSION SEQUENCE [HIJACK]
                                a repository made with python-tuf's Metadata API from those
                                keys: PACKAGE listed by the delegated role 'apps' (paths
                                'app-*.zip') with custom.signet for CHANNEL, and 'readme.txt'
                                listed by targets; consistent snapshots. With HIJACK, a second
                                role 'community' (paths 'community/*') lists it as
                                community/tool.zip under NAME with sequence 99.
  ngclient METADATA_URL TARGETS_URL ROOT TARGET OUTDIR
                                python-tuf's ngclient refreshes and downloads TARGET; prints its
                                custom object as JSON.
  resign FILE ROOT OUT KEY.pem... [--edit PYTHON]...
                                an attacker (or a test) re-signs metadata: runs each PYTHON
                                statement on `s` (the signed object), then signs it with each
                                key (its key id found in ROOT's keys or delegations), replacing
                                the signatures, and writes OUT.
"""

import datetime
import hashlib
import json
import os
import sys
import zipfile

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from securesystemslib.formats import encode_canonical
from securesystemslib.signer import CryptoSigner, SSlibKey
from tuf.api.metadata import (
    DelegatedRole,
    Delegations,
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer


def write_key(path, key):
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    os.chmod(path, 0o600)


def load_key(path):
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), None)


def keys(directory):
    os.makedirs(directory, exist_ok=True)
    write_key(f"{directory}/root.pem", rsa.generate_private_key(65537, 2048))
    write_key(f"{directory}/targets.pem", rsa.generate_private_key(65537, 2048))
    write_key(f"{directory}/apps.pem", rsa.generate_private_key(65537, 2048))
    write_key(f"{directory}/timestamp.pem", ec.generate_private_key(ec.SECP256R1()))
    write_key(f"{directory}/snapshot.pem", ed25519.Ed25519PrivateKey.generate())


def signer(path, scheme=None):
    key = load_key(path)
    if isinstance(key, rsa.RSAPrivateKey):
        return CryptoSigner(key, SSlibKey.from_crypto(key.public_key(), scheme=scheme or "rsassa-pss-sha256"))
    return CryptoSigner(key, SSlibKey.from_crypto(key.public_key()))


def manifest_sha256(package):
    with zipfile.ZipFile(package) as z:
        return hashlib.sha256(z.read(".signet/manifest.json")).hexdigest()


def pyrepo(directory, package, channel, name, version, sequence, hijack=None):
    k = f"{directory}/keys"
    signers = {
        "root": signer(f"{k}/root.pem"),
        "targets": signer(f"{k}/targets.pem", "rsa-pkcs1v15-sha256"),
        "snapshot": signer(f"{k}/snapshot.pem"),
        "timestamp": signer(f"{k}/timestamp.pem"),
    }
    apps = signer(f"{k}/apps.pem")
    expires = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(days=30)
    md = f"{directory}/metadata"
    tg = f"{directory}/targets"
    os.makedirs(md, exist_ok=True)
    os.makedirs(tg, exist_ok=True)

    root = Metadata(Root(expires=expires, consistent_snapshot=True))
    for role, s in signers.items():
        root.signed.add_key(s.public_key, role)

    def artifact(path, data, custom=None):
        target = TargetFile.from_data(path, data, ["sha256"])
        if custom is not None:
            target.unrecognized_fields["custom"] = custom
        folder, base = os.path.split(path)
        os.makedirs(os.path.join(tg, folder), exist_ok=True)
        with open(os.path.join(tg, folder, f"{target.hashes['sha256']}.{base}"), "wb") as f:
            f.write(data)
        return target

    with open(package, "rb") as f:
        package_bytes = f.read()
    package_name = os.path.basename(package)
    custom = {"signet": {"name": name, "version": version, "sequence": int(sequence),
                         "manifest_sha256": manifest_sha256(package), "channels": [channel]}}
    delegated = Metadata(Targets(expires=expires))
    delegated.signed.targets[package_name] = artifact(package_name, package_bytes, custom)

    targets = Metadata(Targets(expires=expires))
    targets.signed.targets["readme.txt"] = artifact("readme.txt", b"read me\n")
    roles = {"apps": DelegatedRole("apps", [apps.public_key.keyid], 1, False, paths=["app-*.zip"])}
    community = None
    if hijack is not None:
        # A role delegated only community/* lists community/tool.zip under another role's
        # package name, with a higher sequence (issue 48's hijack).
        roles["community"] = DelegatedRole("community", [apps.public_key.keyid], 1, False, paths=["community/*"])
        community = Metadata(Targets(expires=expires))
        with open(hijack, "rb") as f:
            hijack_bytes = f.read()
        hijack_custom = {"signet": {"name": name, "version": "99", "sequence": 99,
                                    "manifest_sha256": manifest_sha256(hijack), "channels": [channel]}}
        community.signed.targets["community/tool.zip"] = artifact("community/tool.zip", hijack_bytes, hijack_custom)
    targets.signed.delegations = Delegations(keys={apps.public_key.keyid: apps.public_key}, roles=roles)

    snapshot = Metadata(Snapshot(expires=expires))
    snapshot.signed.meta["targets.json"] = MetaFile(1)
    snapshot.signed.meta["apps.json"] = MetaFile(1)
    if community is not None:
        snapshot.signed.meta["community.json"] = MetaFile(1)
    timestamp = Metadata(Timestamp(expires=expires))

    def write(metadata, role_signer, filename):
        metadata.sign(role_signer)
        data = metadata.to_bytes(JSONSerializer(compact=False))
        with open(f"{md}/{filename}", "wb") as f:
            f.write(data)
        return data

    write(root, signers["root"], "1.root.json")
    write(delegated, apps, "1.apps.json")
    if community is not None:
        write(community, apps, "1.community.json")
    write(targets, signers["targets"], "1.targets.json")
    snapshot_bytes = write(snapshot, signers["snapshot"], "1.snapshot.json")
    timestamp.signed.snapshot_meta = MetaFile(1, len(snapshot_bytes), {"sha256": hashlib.sha256(snapshot_bytes).hexdigest()})
    write(timestamp, signers["timestamp"], "timestamp.json")


def ngclient(metadata_url, targets_url, root, target, outdir):
    from tuf.ngclient import Updater

    metadata_dir = f"{outdir}/metadata"
    os.makedirs(metadata_dir, exist_ok=True)
    with open(root, "rb") as f:
        bootstrap = f.read()
    updater = Updater(metadata_dir, metadata_url, outdir, targets_url, bootstrap=bootstrap)
    updater.refresh()
    info = updater.get_targetinfo(target)
    if info is None:
        sys.exit(f"{target} not found")
    path = updater.download_target(info)
    print(json.dumps({"path": path, "custom": info.custom}))


def resign(path, root_path, out, key_paths, edits):
    with open(path) as f:
        document = json.load(f)
    with open(root_path) as f:
        root = json.load(f)["signed"]
    known = dict(root.get("keys", {}))
    known.update(root.get("delegations", {}).get("keys", {}))
    s = document["signed"]
    for edit in edits:
        exec(edit, {"s": s, "hashlib": hashlib})
    data = encode_canonical(s).encode()
    signatures = []
    for key_path in key_paths:
        key = load_key(key_path)
        public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        for keyid, entry in known.items():
            pem = entry["keyval"]["public"]
            try:
                candidate = serialization.load_pem_public_key(pem.encode()).public_bytes(
                    serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            except ValueError:
                candidate = bytes.fromhex(pem) if len(pem) == 64 else b""
            if candidate == public or (isinstance(key, ed25519.Ed25519PrivateKey) and candidate == key.public_key().public_bytes(
                    serialization.Encoding.Raw, serialization.PublicFormat.Raw)):
                break
        else:
            sys.exit(f"{key_path}: no key id in {root_path}")
        if isinstance(key, rsa.RSAPrivateKey):
            if entry["scheme"] == "rsa-pkcs1v15-sha256":
                sig = key.sign(data, padding.PKCS1v15(), hashes.SHA256())
            else:
                sig = key.sign(data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.DIGEST_LENGTH), hashes.SHA256())
        elif isinstance(key, ec.EllipticCurvePrivateKey):
            sig = key.sign(data, ec.ECDSA(hashes.SHA256()))
        else:
            sig = key.sign(data)
        signatures.append({"keyid": keyid, "sig": sig.hex()})
    document["signatures"] = signatures
    with open(out, "w") as f:
        json.dump(document, f, indent=1)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "keys":
        keys(args[0])
    elif command == "pyrepo":
        pyrepo(*args)
    elif command == "ngclient":
        ngclient(*args)
    elif command == "resign":
        edits = [args[i + 1] for i, a in enumerate(args) if a == "--edit"]
        rest = [a for i, a in enumerate(args) if a != "--edit" and (i == 0 or args[i - 1] != "--edit")]
        resign(rest[0], rest[1], rest[2], rest[3:], edits)
    else:
        sys.exit(f"unknown command {command}")
