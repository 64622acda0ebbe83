import struct, sys, zipfile
path, name, where, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
info = zipfile.ZipFile(path).getinfo(name)
data = bytearray(open(path, 'rb').read())
n, e = struct.unpack('<HH', data[info.header_offset + 26:info.header_offset + 30])
start = info.header_offset + 30 + n + e
offset = start + min(info.compress_size - 1, max(0, int(info.compress_size * where) - 16 if where > 0 else 16))
data[offset] ^= 0x5a
open(out, 'wb').write(data)
print(info.compress_type)
