import fcntl, os, sys, time, subprocess
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0); os.write(fd, b"%d\n" % os.getpid())
r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
print(r.returncode); print(r.stderr)
