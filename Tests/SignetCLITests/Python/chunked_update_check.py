import hashlib, json, struct, sys, zipfile
sys.path.insert(0, sys.argv[2]); import chunk_index
z = zipfile.ZipFile(sys.argv[1]); raw = open(sys.argv[1], "rb").read()
manifest, indexes = chunk_index.indexes(sys.argv[1]); out = {}
for f in manifest["files"]:
    info = z.getinfo(f["path"]); chunks = 0; valid = True
    if f["path"] in indexes:
        index = indexes[f["path"]]; records = index["records"]
        name_length, extra_length = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
        start = info.header_offset + 30 + name_length + extra_length; offset = 0
        # A stored entry's chunk is at its file offset in the entry; a deflated one's
        # is checked in the inflated bytes (DeflatedChunksCLITests checks its segments).
        data = raw[start:start + info.compress_size] if info.compress_type == 0 else z.read(f["path"])
        rs = index["record_size"]
        for i in range(0, len(records), rs):
            length = int.from_bytes(records[i:i + 3], "big")
            valid = valid and hashlib.sha256(data[offset:offset + length]).digest()[:rs - 3] == records[i + 3:i + rs]
            offset += length; chunks += 1
        blocks = index["blocks"]
        valid = valid and offset == f["size"] and len(blocks) == 4 * ((len(data) + 4095) // 4096)
        valid = valid and all(chunk_index.block_hint(data[b * 4096:(b + 1) * 4096], index["block_scheme"]) == blocks[4 * b:4 * b + 4] for b in range(len(blocks) // 4))
    out[f["path"]] = [info.compress_type, chunks, valid]
print(json.dumps(out))
