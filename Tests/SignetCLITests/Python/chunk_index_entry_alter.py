import sys, zipfile, struct, zlib
name = b".signet/needs-signet-0.2/chunk-index"
path = sys.argv[1]; z = zipfile.ZipFile(path); info = z.getinfo(name.decode())
raw = bytearray(open(path, "rb").read())
n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
start = info.header_offset + 30 + n + e
raw[start + 4 * ((15 << 20) // 4096)] ^= 0x01   # the hint of the block changed (hints first)
# The zip CRC made right again (in the local header and the central record): only
# the manifest's slice hash can tell.
crc = struct.pack("<I", zlib.crc32(raw[start:start + info.file_size]))
raw[info.header_offset + 14:info.header_offset + 18] = crc
at = 0
while True:
    at = raw.find(b"PK\x01\x02", at + 1)
    assert at > 0
    length = struct.unpack("<H", raw[at + 28:at + 30])[0]
    if raw[at + 46:at + 46 + length] == name:
        raw[at + 16:at + 20] = crc
        break
open(path, "wb").write(raw)
