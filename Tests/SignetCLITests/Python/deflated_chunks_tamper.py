import struct, sys, zipfile, zlib
kind, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3]); import chunk_index
z = zipfile.ZipFile(path); info = z.getinfo("image.bin"); raw = bytearray(open(path, "rb").read())
lengths = chunk_index.indexes(path)[1]["image.bin"]["segments"]
n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
start = info.header_offset + 30 + n + e; k = (4 << 20) // 8192
offset = start + sum(int.from_bytes(lengths[2 * i:2 * i + 2], "big") for i in range(k))
length = int.from_bytes(lengths[2 * k:2 * k + 2], "big")
if kind == "altered":
    raw[offset + length // 2] ^= 0xFF
else:
    c = zlib.compressobj(9, zlib.DEFLATED, -15); bomb = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < length, (len(bomb), length)
    raw[offset:offset + len(bomb)] = bomb
open(path, "wb").write(raw)
