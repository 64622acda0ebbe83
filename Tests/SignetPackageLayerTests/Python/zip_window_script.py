import sys, zipfile
class Stream:
    def __init__(self, f): self.f = f
    def write(self, b): return self.f.write(b)
    def flush(self): self.f.flush()
path, count, streamed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
with open(path, "wb") as raw:
    with zipfile.ZipFile(Stream(raw) if streamed else raw, "w") as archive:
        for index in range(count):
            info = zipfile.ZipInfo(f"d{index % 7}/entry-{index}.txt", (2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if index % 3 else zipfile.ZIP_STORED
            info.comment = b"comment %d" % index if index % 5 == 0 else b""
            # An extra field of an unassigned ID with 4 bytes of data.
            info.extra = b"\xfe\xca\x04\x00abcd" if index % 4 == 0 else b""
            info.external_attr = 0o644 << 16
            archive.writestr(info, (b"entry %d " % index) * (index % 50 + 1))
