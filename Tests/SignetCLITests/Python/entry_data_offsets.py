import json, struct, sys, zipfile
z = zipfile.ZipFile(sys.argv[1]); data = open(sys.argv[1], 'rb').read(); out = {}
for i in z.infolist():
    n, e = struct.unpack('<HH', data[i.header_offset + 26:i.header_offset + 30])
    out[i.filename] = i.header_offset + 30 + n + e
out[""] = z.start_dir
print(json.dumps(out))
