import hashlib, json, struct, sys, zipfile, zlib
sys.path.insert(0, sys.argv[2]); import chunk_index
z = zipfile.ZipFile(sys.argv[1]); raw = open(sys.argv[1], "rb").read()
manifest, indexes = chunk_index.indexes(sys.argv[1]); out = {}
for f in manifest["files"]:
    info = z.getinfo(f["path"]); data = z.read(f["path"]); chunks = segments = 0; valid = True
    n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + n + e
    index = indexes.get(f["path"])
    if index:
        records = index["records"]; offset = 0
        rs = index["record_size"]
        for i in range(0, len(records), rs):
            length = int.from_bytes(records[i:i + 3], "big")
            valid = valid and hashlib.sha256(data[offset:offset + length]).digest()[:rs - 3] == records[i + 3:i + rs]
            offset += length; chunks += 1
    if index and index["segments"] is not None:
        lengths = index["segments"]; position = start
        for k in range(0, len(lengths) // 2):
            length = int.from_bytes(lengths[2 * k:2 * k + 2], "big")
            d = zlib.decompressobj(-15, zdict=data[max(0, k * 8192 - 32768):k * 8192])
            valid = valid and d.decompress(raw[position:position + length]) == data[k * 8192:(k + 1) * 8192]
            position += length; segments += 1
        valid = valid and position == start + info.compress_size
    out[f["path"]] = [info.compress_type, chunks, segments, valid]
print(json.dumps(out))
