import os, subprocess, sys
path, command = sys.argv[1], sys.argv[2:]
p = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
fd = os.open(path, os.O_WRONLY)
n = 0
while p.poll() is None:
    os.pwrite(fd, bytes([n % 251]), 1 << 20); n += 1
print(p.returncode); sys.stdout.write(p.stderr.read().decode())
