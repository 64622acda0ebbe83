import subprocess, sys
commands, current = [], []
for word in sys.argv[1:]:
    if word == "--":
        commands.append(current); current = []
    else:
        current.append(word)
commands.append(current)
running = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands]
print(" ".join(str(p.wait()) for p in running))
