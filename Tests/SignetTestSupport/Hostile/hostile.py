#!/usr/bin/env python3
"""Builds hostile variants of a valid Signet package, for the tests.

    hostile.py VALID.zip KEY.pem MUTATION OUT.zip

Reads every entry of VALID.zip, applies MUTATION, re-signs what must still verify (with the
openssl CLI and KEY.pem), and writes OUT.zip. Some mutations patch the written bytes directly
(names that zipfile cannot write, CRCs, offsets, truncation).
"""
import hashlib, io, json, struct, subprocess, sys, zipfile, zlib

valid, key, mutation, out = sys.argv[1:5]
src = zipfile.ZipFile(valid)
entries = [(i.filename, src.read(i.filename)) for i in src.infolist()]
names = [n for n, _ in entries]
resources = [n for n in names if not n.startswith(".signet/")]
first = resources[0]


def sign(data):
    p = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=data, capture_output=True, check=True)
    return p.stdout


def manifest():
    return json.loads(dict(entries)[".signet/manifest.json"])


def set_manifest(m):
    data = (json.dumps(m, sort_keys=True, indent=2) + "\n").encode()
    replace(".signet/manifest.json", data)
    replace(".signet/manifest.json.sig", sign(data))


def replace(name, data):
    global entries
    entries = [(n, data if n == name else d) for n, d in entries]


def add_resource(name, data, listed=True):
    """A resource with a valid signature; in the manifest only if listed."""
    entries.insert(0, (name, data))
    entries.append((".signet/sigs/" + name + ".sig", sign(data)))
    if listed:
        m = manifest()
        m["files"].append({"mode": "0644", "path": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)})
        set_manifest(m)


patches = []          # (placeholder bytes, real bytes): renamed in the written file
infos = {}            # name -> ZipInfo overrides
compress = {}         # name -> method

if mutation == "traversal":
    add_resource("../evil.txt", b"x")
elif mutation == "absolute":
    add_resource("/etc/evil", b"x")
elif mutation == "backslash":
    add_resource("dir\\evil.txt", b"x")
elif mutation == "dotdot-inside":
    add_resource("a/../../b", b"x")
elif mutation == "nul-name":
    add_resource("nulXname", b"x")
    patches.append((b"nulXname", b"nul\x00name"))
elif mutation == "control-name":
    add_resource("bell\x07.txt", b"x")
elif mutation == "invalid-utf8":
    add_resource("badXXutf8", b"x")
    patches.append((b"badXXutf8", b"bad\xff\xfeutf8"))
elif mutation == "long-name":
    add_resource("d/" + "n" * 300, b"x")
elif mutation == "symlink":
    add_resource("link", b"/etc/passwd")
    infos["link"] = 0o120777
elif mutation == "duplicate":
    entries.append((first, b"second copy"))
elif mutation == "duplicate-first":
    entries.insert(0, (first, b"earlier copy"))
elif mutation == "nfc-twins":
    add_resource("caf\u00e9.txt", b"1")
    add_resource("cafe\u0301.txt", b"2")
elif mutation == "kelvin-twin":
    # U+212A KELVIN SIGN is canonically "K": one non-ASCII name, one ASCII.
    add_resource("K.txt", b"1")
    add_resource("\u212a.txt", b"2")
elif mutation == "twins-neither-nfc":
    # Two spellings of one name, neither in NFC (combining marks in either order).
    add_resource("a\u0323\u0307.txt", b"1")
    add_resource("a\u0307\u0323.txt", b"2")
elif mutation == "duplicate-signature":
    entries.append((".signet/sigs/" + first + ".sig", dict(entries)[".signet/sigs/" + first + ".sig"]))
elif mutation == "nfd-entry-nfc-manifest":
    # The manifest lists the NFC spelling; the archive holds the NFD one (and its signature).
    add_resource("cafe\u0301.txt", b"coffee", listed=False)
    m = manifest()
    m["files"].append({"mode": "0644", "path": "caf\u00e9.txt", "sha256": hashlib.sha256(b"coffee").hexdigest(), "size": 6})
    set_manifest(m)
elif mutation == "directory-with-data":
    entries.insert(0, ("dir/", b"data in a directory entry"))
elif mutation == "encrypted":
    infos[first] = "encrypted"
elif mutation == "unknown-signet-entry":
    entries.append((".signet/extra.txt", b"?"))
elif mutation == "extra-resource":
    add_resource("smuggled.txt", b"not in the manifest", listed=False)
elif mutation == "missing-resource":
    entries = [(n, d) for n, d in entries if n != first]
elif mutation == "missing-signature":
    entries = [(n, d) for n, d in entries if n != ".signet/sigs/" + first + ".sig"]
elif mutation == "missing-manifest":
    entries = [(n, d) for n, d in entries if not n.startswith(".signet/manifest.json")]
elif mutation == "missing-manifest-signature":
    entries = [(n, d) for n, d in entries if n != ".signet/manifest.json.sig"]
elif mutation == "modified-resource":
    replace(first, dict(entries)[first] + b"!")
elif mutation == "modified-last":
    last = resources[-1]
    replace(last, dict(entries)[last] + b"!")
elif mutation == "modified-manifest":
    replace(".signet/manifest.json", dict(entries)[".signet/manifest.json"].replace(b'"version"', b'"version" ', 1))
elif mutation == "long-signature":
    replace(".signet/sigs/" + first + ".sig", dict(entries)[".signet/sigs/" + first + ".sig"] + b"\x00\x00")
elif mutation == "short-signature":
    replace(".signet/sigs/" + first + ".sig", dict(entries)[".signet/sigs/" + first + ".sig"][:-1])
elif mutation == "swapped-signature":
    other = resources[1]
    replace(".signet/sigs/" + first + ".sig", dict(entries)[".signet/sigs/" + other + ".sig"])
elif mutation == "not-json":
    set_manifest_bytes = b"this is not json"
    replace(".signet/manifest.json", set_manifest_bytes)
    replace(".signet/manifest.json.sig", sign(set_manifest_bytes))
elif mutation == "wrong-format":
    m = manifest(); m["format"] = "signet/2"; set_manifest(m)
elif mutation == "expired":
    m = manifest(); m["created"] = "2020-01-01T00:00:00Z"; m["expires"] = "2021-01-01T00:00:00Z"; set_manifest(m)
elif mutation == "deflate-bomb":
    bomb = b"\x00" * (200 << 20)
    add_resource("bomb.bin", bomb)
    compress["bomb.bin"] = zipfile.ZIP_DEFLATED
elif mutation == "size-lie":
    # The central directory claims a small size; the data inflates to far more.
    data = b"A" * (4 << 20)
    add_resource("lie.bin", b"A" * 16)
    entries[0] = ("lie.bin", data)
    compress["lie.bin"] = zipfile.ZIP_DEFLATED
    infos["lie.bin"] = "lie"
elif mutation == "cd-size-lie":
    compress[first] = zipfile.ZIP_DEFLATED
elif mutation == "deflate-trailing":
    compress[first] = zipfile.ZIP_DEFLATED
elif mutation == "record-signature":
    # A valid signature by the key, but over other bytes than the package's signature record.
    replace(".signet/signatures.sig", sign(b"not the record"))
elif mutation == "signed-huge-size":
    m = manifest(); m["files"][0]["size"] = 2**64 - 1; set_manifest(m)
elif mutation == "signed-duplicate-key":
    data = dict(entries)[".signet/manifest.json"].replace(b'"sequence"', b'"sequence": 999,\n  "sequence"', 1)
    replace(".signet/manifest.json", data)
    replace(".signet/manifest.json.sig", sign(data))
elif mutation == "directory-flood":
    for i in range(int(sys.argv[5]) if len(sys.argv) > 5 else 120_000):
        entries.insert(0, ("d%07d/" % i, b""))
elif mutation in ("bad-crc", "truncated", "overlapping", "too-many-files", "valid", "descriptor-valid", "descriptor-crc",
                  "descriptor-size", "cd-crc-only", "local-method", "local-name", "local-size", "prepended",
                  "gap", "eocd-counts", "comment-zip64-locator", "zip64-offset-overflow", "flag-strong-encryption",
                  "unicode-path-extra", "stored-size", "extra-damaged", "cd-trailing-bytes"):
    pass
else:
    sys.exit("unknown mutation " + mutation)

if mutation == "too-many-files":
    for i in range(100_000):
        entries.insert(0, ("many/%06d" % i, b""))

class Unseekable(io.RawIOBase):
    """A stream zipfile cannot seek in: it then writes each entry with a data descriptor."""
    def __init__(self): self.data = bytearray()
    def writable(self): return True
    def write(self, b): self.data += b; return len(b)
    def tell(self): raise OSError("unseekable")
    def getvalue(self): return bytes(self.data)

buffer = Unseekable() if mutation.startswith("descriptor-") else io.BytesIO()
with zipfile.ZipFile(buffer, "w") as z:
    for name, data in entries:
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = compress.get(name, zipfile.ZIP_STORED)
        info.external_attr = 0o100644 << 16
        override = infos.get(name)
        if isinstance(override, int):
            info.external_attr = override << 16
        if override == "encrypted":
            info.flag_bits |= 0x1
        z.writestr(info, data)
raw = bytearray(buffer.getvalue())

def central_records():
    end = raw.rindex(b"PK\x05\x06")
    count, size, offset = struct.unpack("<HII", raw[end + 10:end + 20])
    position = offset
    for _ in range(count):
        name_length, extra_length, comment_length = struct.unpack("<HHH", raw[position + 28:position + 34])
        yield position, bytes(raw[position + 46:position + 46 + name_length])
        position += 46 + name_length + extra_length + comment_length

def record_of(wanted):
    for position, name in central_records():
        if name == wanted.encode():
            return position, struct.unpack("<I", raw[position + 42:position + 46])[0]
    raise SystemExit("no entry " + wanted)

def end_record():
    return raw.rindex(b"PK\x05\x06")

def add_central_extra(position, extra):
    """Appends an extra field to the central record at `position` (zipfile cannot write one there)."""
    name_length, extra_length = struct.unpack("<HH", raw[position + 28:position + 32])
    insert_at = position + 46 + name_length + extra_length
    raw[position + 30:position + 32] = struct.pack("<H", extra_length + len(extra))
    raw[insert_at:insert_at] = extra
    end = end_record()
    raw[end + 12:end + 16] = struct.pack("<I", struct.unpack("<I", raw[end + 12:end + 16])[0] + len(extra))

if mutation in ("descriptor-crc", "descriptor-size"):
    position, local = record_of(first)
    name_length, extra_length = struct.unpack("<HH", raw[local + 26:local + 30])
    size = struct.unpack("<I", raw[position + 20:position + 24])[0]
    descriptor = local + 30 + name_length + extra_length + size
    assert raw[descriptor:descriptor + 4] == b"PK\x07\x08"
    at = descriptor + (4 if mutation == "descriptor-crc" else 12)
    raw[at:at + 4] = struct.pack("<I", struct.unpack("<I", raw[at:at + 4])[0] ^ 1)
if mutation == "cd-size-lie":
    # The real, signed content, deflated; both headers understate its size.
    position, local = record_of(first)
    raw[position + 24:position + 28] = struct.pack("<I", 16)
    raw[local + 22:local + 26] = struct.pack("<I", 16)
if mutation == "deflate-trailing":
    # Bytes after the end of the deflate stream, inside the entry: both headers' compressed
    # sizes count them, every later offset moves; the data still inflates to the signed content.
    position, local = record_of(first)
    name_length, extra_length = struct.unpack("<HH", raw[local + 26:local + 30])
    compressed = struct.unpack("<I", raw[position + 20:position + 24])[0]
    junk = b"\x00 hidden after the deflate stream"
    raw[local + 30 + name_length + extra_length + compressed:local + 30 + name_length + extra_length + compressed] = junk
    raw[local + 18:local + 22] = struct.pack("<I", compressed + len(junk))
    end = end_record()
    raw[end + 16:end + 20] = struct.pack("<I", struct.unpack("<I", raw[end + 16:end + 20])[0] + len(junk))
    for record, name in list(central_records()):
        offset = struct.unpack("<I", raw[record + 42:record + 46])[0]
        if offset > local:
            raw[record + 42:record + 46] = struct.pack("<I", offset + len(junk))
        if name == first.encode():
            raw[record + 20:record + 24] = struct.pack("<I", compressed + len(junk))
if mutation == "cd-crc-only":
    position, local = record_of(first)
    raw[position + 16:position + 20] = struct.pack("<I", struct.unpack("<I", raw[position + 16:position + 20])[0] ^ 1)
if mutation == "local-method":
    position, local = record_of(first)
    raw[local + 8:local + 10] = struct.pack("<H", 8)
if mutation == "local-name":
    position, local = record_of(first)
    raw[local + 30] ^= 0x20
if mutation == "local-size":
    position, local = record_of(first)
    raw[local + 22:local + 26] = struct.pack("<I", struct.unpack("<I", raw[local + 22:local + 26])[0] + 1)
if mutation in ("prepended", "gap"):
    # Bytes that belong to no entry: before the first one, or between the first two.
    records = sorted(central_records(), key=lambda r: struct.unpack("<I", raw[r[0] + 42:r[0] + 46])[0])
    cut = 0 if mutation == "prepended" else struct.unpack("<I", raw[records[1][0] + 42:records[1][0] + 46])[0]
    for position, name in records:
        local = struct.unpack("<I", raw[position + 42:position + 46])[0]
        if local >= cut:
            raw[position + 42:position + 46] = struct.pack("<I", local + 8)
    end = end_record()
    raw[end + 16:end + 20] = struct.pack("<I", struct.unpack("<I", raw[end + 16:end + 20])[0] + 8)
    raw[cut:cut] = b"HIDDEN!!"
if mutation == "eocd-counts":
    end = end_record()
    raw[end + 8:end + 10] = struct.pack("<H", struct.unpack("<H", raw[end + 8:end + 10])[0] - 1)
if mutation == "comment-zip64-locator":
    # A 44-byte comment holding a ZIP64 locator with a huge offset and an end record after it.
    fake = struct.pack("<IIQI", 0x07064B50, 0, 0xFFFFFFFFFFFFFFF0, 1) + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 2) + b"!!"
    assert len(fake) == 44
    end = end_record()
    raw[end + 20:end + 22] = struct.pack("<H", len(fake))
    raw += fake
if mutation == "zip64-offset-overflow":
    # A ZIP64 end record whose directory offset + size wraps around 2**64.
    end = end_record()
    count, size = struct.unpack("<HI", raw[end + 10:end + 16])
    record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, 2**64 - size + 5)
    locator = struct.pack("<IIQI", 0x07064B50, 0, end, 1)
    raw[end + 16:end + 20] = struct.pack("<I", 0xFFFFFFFF)
    raw[end:end] = record + locator
if mutation == "flag-strong-encryption":
    position, local = record_of(first)
    raw[position + 8] |= 0x40
    raw[local + 6] |= 0x40
if mutation == "unicode-path-extra":
    position, local = record_of(first)
    name_length = struct.unpack("<H", raw[position + 28:position + 30])[0]
    unicode_name = b"other-name.txt"
    add_central_extra(position, struct.pack("<HHBI", 0x7075, 5 + len(unicode_name), 1, zlib.crc32(raw[position + 46:position + 46 + name_length])) + unicode_name)
if mutation == "stored-size":
    position, local = record_of(first)
    size = struct.unpack("<I", raw[position + 24:position + 28])[0]
    raw[position + 24:position + 28] = struct.pack("<I", size - 1)
    raw[local + 22:local + 26] = struct.pack("<I", size - 1)
if mutation == "extra-damaged":
    position, local = record_of(first)
    add_central_extra(position, struct.pack("<HH", 0xCAFE, 200) + b"xx")
if mutation == "cd-trailing-bytes":
    end = end_record()
    raw[end:end] = b"TRAILING"
    raw[end + 8 + 12:end + 8 + 16] = struct.pack("<I", struct.unpack("<I", raw[end + 8 + 12:end + 8 + 16])[0] + 8)

if infos.get("lie.bin") == "lie":
    for position, name in central_records():
        if name == b"lie.bin":
            local = struct.unpack("<I", raw[position + 42:position + 46])[0]
            raw[position + 24:position + 28] = struct.pack("<I", 16)
            raw[local + 22:local + 26] = struct.pack("<I", 16)
if mutation == "bad-crc":
    for position, name in central_records():
        if name == first.encode():
            local = struct.unpack("<I", raw[position + 42:position + 46])[0]
            crc = struct.unpack("<I", raw[position + 16:position + 20])[0] ^ 0xFFFFFFFF
            raw[position + 16:position + 20] = struct.pack("<I", crc)
            raw[local + 14:local + 18] = struct.pack("<I", crc)
if mutation == "overlapping":
    records = list(central_records())
    target = struct.unpack("<I", raw[records[0][0] + 42:records[0][0] + 46])[0]
    raw[records[1][0] + 42:records[1][0] + 46] = struct.pack("<I", target)
for placeholder, real in patches:
    # Only in the name fields of the central and local headers, not in data that mentions it.
    assert len(placeholder) == len(real)
    for position, name in list(central_records()):
        if name == placeholder:
            local = struct.unpack("<I", raw[position + 42:position + 46])[0]
            raw[position + 46:position + 46 + len(real)] = real
            raw[local + 30:local + 30 + len(real)] = real
if mutation == "encrypted":
    # zipfile will not write the flag itself: set bit 0 (encrypted) in both headers.
    for position, name in central_records():
        if name == first.encode():
            local = struct.unpack("<I", raw[position + 42:position + 46])[0]
            raw[position + 8] |= 1
            raw[local + 6] |= 1
if mutation == "truncated":
    raw = raw[: len(raw) * 2 // 3]
open(out, "wb").write(raw)
