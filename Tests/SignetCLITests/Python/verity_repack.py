import re, subprocess, sys, zipfile
src, dst, key, passfile = sys.argv[1:5]
a = zipfile.ZipFile(src)
manifest = a.read(".signet/manifest.json").decode()
digest = re.search(r'"path" : "%s".*?"verity" : "([0-9a-f]{64})"' % re.escape(sys.argv[5]), manifest, re.S).group(1)
manifest = manifest.replace(digest, ("0" if digest[0] != "0" else "1") + digest[1:]).encode()
sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key, "-passin", "file:" + passfile], input=manifest, capture_output=True, check=True).stdout
with zipfile.ZipFile(dst, "w") as b:
    for info in a.infolist():
        data = manifest if info.filename == ".signet/manifest.json" else sig if info.filename == ".signet/manifest.json.sig" else a.read(info.filename)
        b.writestr(info, data, compress_type=info.compress_type)
