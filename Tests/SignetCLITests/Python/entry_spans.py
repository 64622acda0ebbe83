import json, struct, sys, zipfile
z = zipfile.ZipFile(sys.argv[1]); data = open(sys.argv[1], 'rb').read(); out = {}
for i in z.infolist():
    n, e = struct.unpack('<HH', data[i.header_offset + 26:i.header_offset + 30])
    out[i.filename] = [i.header_offset, i.header_offset + 30 + n + e + i.compress_size]
print(json.dumps({"spans": out, "directory": z.start_dir}))
