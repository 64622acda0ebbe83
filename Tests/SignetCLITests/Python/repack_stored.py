import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as source, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_STORED) as out:
    for info in source.infolist():
        data = source.read(info)
        if info.filename == "firmware.bin":
            data = data[:15000000] + bytes([data[15000000] ^ 1]) + data[15000001:]
        out.writestr(info, data)
