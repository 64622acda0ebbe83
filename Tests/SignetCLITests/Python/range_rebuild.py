import sys, zipfile
src = zipfile.ZipFile(sys.argv[1]); entries = [(i, src.read(i.filename)) for i in src.infolist()]; src.close()
with zipfile.ZipFile(sys.argv[1], "w") as out:
    for info, data in entries:
        if info.filename == "d03/f0003.bin": data = data[:10] + bytes([data[10] ^ 1]) + data[11:]
        out.writestr(info, data)
