import subprocess, sys, time
unpack2, unpack3, reverify = sys.argv[1].split("\x1f"), sys.argv[2].split("\x1f"), sys.argv[3].split("\x1f")
updater = subprocess.Popen([sys.executable, "-c", "import subprocess, sys\nfor i in range(16):\n    subprocess.run(sys.argv[1 + i % 2].split('\\x1f'), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)", sys.argv[1], sys.argv[2]])
results = []
while updater.poll() is None:
    r = subprocess.run(reverify, capture_output=True, text=True)
    results.append(r.returncode)
    if r.returncode != 0: print(r.returncode, r.stdout, r.stderr, file=sys.stderr)
print(" ".join(map(str, results)))
