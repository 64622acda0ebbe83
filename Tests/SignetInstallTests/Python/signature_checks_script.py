import sys, zipfile
source, target, bad, modified, truncated = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
name = lambda i: "f%04d.txt" % int(i)
swap = {".signet/sigs/" + name(i) + ".sig" for i in bad.split(",") if i}
cut = {".signet/sigs/" + name(i) + ".sig" for i in truncated.split(",") if i}
change = {name(i) for i in modified.split(",") if i}
with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
    other = old.read(".signet/sigs/" + name(1) + ".sig")
    for info in old.infolist():
        data = old.read(info)
        if info.filename in swap: data = other
        if info.filename in cut: data = data[:-1]
        if info.filename in change: data = data[:-2] + b"X\n"   # same size, other bytes
        new.writestr(info, data)
