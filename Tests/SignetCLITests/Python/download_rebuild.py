import sys, zipfile
src = zipfile.ZipFile(sys.argv[1]); entries = [(i, src.read(i.filename)) for i in src.infolist()]; src.close()
with zipfile.ZipFile(sys.argv[1], "w") as out:
    for info, data in entries:
        if info.filename == "data.bin": data = data[:1000] + bytes([data[1000] ^ 0x55]) + data[1001:]
        out.writestr(info, data)
