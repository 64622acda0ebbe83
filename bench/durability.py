#!/usr/bin/env python3
"""How to make N small staged files durable: fsync each, or start writeback of each and then
syncfs, or fsync/fdatasync each in a second pass. Usage: bench/durability.py N DIR MODE...
(modes: fsync-each syncfs-only writeback+syncfs writeback+fsync-pass writeback+fdatasync-pass). DIR must be
on the filesystem to measure; each mode writes a fresh tree of N files with a user xattr."""
import ctypes, os, sys, time, shutil
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
WRITE = 2
n = int(sys.argv[1]); base = sys.argv[2]
data = [os.urandom(200) + b"x" * (i % 3000) for i in range(64)]
def tree(name):
    root = f"{base}/{name}"; shutil.rmtree(root, ignore_errors=True); os.makedirs(root)
    for d in range(50): os.makedirs(f"{root}/d{d:02d}")
    return root
def run(mode):
    os.sync()
    root = tree(mode)
    start = time.monotonic()
    paths = []
    for i in range(n):
        p = f"{root}/d{i % 50:02d}/f{i:05d}"
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data[i % 64])
        os.setxattr(fd, "user.signet.sig", data[0][:256])
        if mode == "fsync-each": os.fsync(fd)
        elif mode != "syncfs-only": libc.sync_file_range(fd, 0, 0, WRITE)
        os.close(fd)
        paths.append(p)
    if mode in ("writeback+syncfs", "syncfs-only"):
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY); libc.syncfs(fd); os.close(fd)
    elif mode == "writeback+fdatasync-pass":
        for p in paths:
            fd = os.open(p, os.O_RDONLY); os.fdatasync(fd); os.close(fd)
        for d in range(50):
            fd = os.open(f"{root}/d{d:02d}", os.O_RDONLY | os.O_DIRECTORY); os.fsync(fd); os.close(fd)
    elif mode == "writeback+fsync-pass":
        for p in paths:
            fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)
    if mode not in ("writeback+syncfs", "syncfs-only"):
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY); os.fsync(fd); os.close(fd)
    return time.monotonic() - start
for mode in sys.argv[3:]:
    print(f"{mode:28} {n} files: {run(mode):.2f} s", flush=True)
