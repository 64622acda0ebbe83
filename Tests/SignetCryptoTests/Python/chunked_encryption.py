# c2sp.org/chunked-encryption@v1 with SHA-256 and AES-256-GCM, written from the specification's
# text with PyPI cryptography (HKDF-Expand, AESGCM): an independent peer for Signet's record layer.
#   seal KEYHEX SALTHEX CONTEXT IN OUT    open KEYHEX CONTEXT IN OUT
import sys
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CHUNK, TAG = 16384, 16

def derive(key, salt, context):
    info = b"c2sp.org/chunked-encryption@v1+" + b"AEAD_AES_256_GCM" + b"\x00" + salt + context
    out = HKDFExpand(algorithm=hashes.SHA256(), length=32 + 12 + 32, info=info).derive(key)
    return out[:32], out[32:44], out[44:]

def nonce(base, index):
    return (int.from_bytes(base, "big") ^ index).to_bytes(12, "big")

def seal(key, salt, context, message):
    k, base, commitment = derive(key, salt, context)
    aead, out = AESGCM(k), [salt, commitment]
    chunks = [message[i:i + CHUNK] for i in range(0, len(message) - len(message) % CHUNK, CHUNK)]
    chunks.append(message[len(message) - len(message) % CHUNK:])
    for index, chunk in enumerate(chunks):
        out.append(aead.encrypt(nonce(base, index), chunk, None))
    return b"".join(out)

def open_(key, context, sealed):
    salt, commitment, body = sealed[:24], sealed[24:56], sealed[56:]
    k, base, expected = derive(key, salt, context)
    if len(sealed) < 56 or commitment != expected: raise SystemExit("commitment")
    aead, out, index = AESGCM(k), [], 0
    while True:
        chunk = body[index * (CHUNK + TAG):(index + 1) * (CHUNK + TAG)]
        if len(chunk) < TAG: raise SystemExit("truncated")
        out.append(aead.decrypt(nonce(base, index), chunk, None))
        if len(chunk) < CHUNK + TAG: break
        index += 1
    if len(body) != (index + 1) * (CHUNK + TAG) - (CHUNK + TAG - len(chunk)): raise SystemExit("trailing")
    return b"".join(out)

if sys.argv[1] == "seal":
    _, _, key, salt, context, src, dst = sys.argv
    open(dst, "wb").write(seal(bytes.fromhex(key), bytes.fromhex(salt), context.encode(), open(src, "rb").read()))
else:
    _, _, key, context, src, dst = sys.argv
    open(dst, "wb").write(open_(bytes.fromhex(key), context.encode(), open(src, "rb").read()))
