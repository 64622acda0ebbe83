"""A Signet package's chunk indexes, read independently of Signet (FORMAT.md §2).

Since issue 51 they are in the stored entry .signet/needs-signet-0.2/chunk-index, each 4096-byte
slice of which the manifest's "chunk_index" binds by SHA-256; a file entry's "index" names its
layout and chunk count. The entry holds every indexed file's block hints, then every indexed
file's chunk records and segment lengths, each part in manifest order. Packages
made before then carry them inline ("chunks", "blocks", "deflate"). indexes() checks every
slice and gives, per chunked path: its chunk records (record_size bytes each: a 3-byte length and
the first 16 bytes of the chunk's SHA-256 in the entry, all 32 inline), its segment lengths
(2 bytes each, or None) and its block hints (4 bytes each) with their scheme.
"""
import base64, hashlib, json, zipfile, zlib

ENTRY = ".signet/needs-signet-0.2/chunk-index"


def indexes(path):
    z = zipfile.ZipFile(path)
    manifest = json.loads(z.read(".signet/manifest.json"))
    entry = None
    if "chunk_index" in manifest:
        info = z.getinfo(ENTRY)
        assert info.compress_type == 0, "the chunk-index entry is stored"
        entry = z.read(ENTRY)
        scheme, body = manifest["chunk_index"].split(":", 1)
        assert scheme == "sha256-4096", scheme
        hashes = base64.b64decode(body)
        assert len(hashes) == 32 * ((len(entry) + 4095) // 4096), "one SHA-256 per slice"
        for i in range(0, len(entry), 4096):
            assert hashlib.sha256(entry[i:i + 4096]).digest() == hashes[i // 128:i // 128 + 32], "slice %d" % (i // 4096)
    # The block hints of every indexed file first, then their chunk records and segment lengths.
    indexed = [f for f in manifest["files"] if "index" in f]
    hints_offset, records_offset = 0, sum(4 * ((f["size"] + 4095) // 4096) for f in indexed)
    out, offset = {}, records_offset
    for f in manifest["files"]:
        size = f["size"]
        if "index" in f:
            layout, count = f["index"].rsplit(":", 1)
            count = int(count)
            assert layout in ("fastcdc1-crc32", "fastcdc1-sync8192-crc32"), layout
            records = entry[offset:offset + 19 * count]
            offset += 19 * count
            segments = None
            if layout == "fastcdc1-sync8192-crc32":
                n = 2 * ((size + 8191) // 8192)
                segments = entry[offset:offset + n]
                offset += n
            n = 4 * ((size + 4095) // 4096)
            blocks = entry[hints_offset:hints_offset + n]
            hints_offset += n
            out[f["path"]] = dict(records=records, record_size=19, segments=segments, blocks=blocks, block_scheme="crc32")
        elif "chunks" in f:
            segments = base64.b64decode(f["deflate"].split(":", 1)[1]) if "deflate" in f else None
            out[f["path"]] = dict(records=base64.b64decode(f["chunks"].split(":", 1)[1]), record_size=35, segments=segments,
                                  blocks=base64.b64decode(f["blocks"].split(":", 1)[1]), block_scheme="sha256t4")
    assert entry is None or offset == len(entry), "the sections fill the entry exactly"
    return manifest, out


def block_hint(data, scheme):
    """A 4096-byte block's hint as the index holds it."""
    if scheme == "crc32":
        return zlib.crc32(data).to_bytes(4, "big")
    return hashlib.sha256(data).digest()[:4]


def to_inline(src, dst, key, passfile):
    """Rewrites package src as Signet made packages between issues 40 and 51: the indexes inline
    in the manifest (SHA-256-prefix block hashes), no chunk-index entry, the manifest signed
    again with openssl (rsa-pkcs1v15-sha256, the key's passphrase in passfile)."""
    import subprocess
    manifest, found = indexes(src)
    z = zipfile.ZipFile(src)
    manifest.pop("chunk_index", None)
    for f in manifest["files"]:
        if f.pop("index", None) is None:
            continue
        index, data = found[f["path"]], z.read(f["path"])
        records, at = b"", 0
        for i in range(0, len(index["records"]), index["record_size"]):
            length = int.from_bytes(index["records"][i:i + 3], "big")
            records += index["records"][i:i + 3] + hashlib.sha256(data[at:at + length]).digest()
            at += length
        f["chunks"] = "fastcdc1:" + base64.b64encode(records).decode()
        f["blocks"] = "sha256t4-4096:" + base64.b64encode(b"".join(
            hashlib.sha256(data[i:i + 4096]).digest()[:4] for i in range(0, len(data), 4096))).decode()
        if index["segments"] is not None:
            f["deflate"] = "sync8192:" + base64.b64encode(index["segments"]).decode()
    text = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key, "-passin", "file:" + passfile],
                               input=text, capture_output=True, check=True).stdout
    with zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            if info.filename == ENTRY:
                continue
            data = {".signet/manifest.json": text, ".signet/manifest.json.sig": signature}.get(info.filename)
            out.writestr(info, z.read(info) if data is None else data, compress_type=info.compress_type)
