import json, os, signal, subprocess, sys, time
marker, number, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
p = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(600):
    if os.path.exists(marker) and open(marker).read().strip(): break
    if p.poll() is not None: break
    time.sleep(0.01)
group = int(open(marker).read().strip()) if os.path.exists(marker) else 0
p.send_signal(number)
status = p.wait()
alive = group != 0
for _ in range(30):
    try: os.killpg(group, 0)
    except OSError: alive = False; break
    time.sleep(0.1)
print(json.dumps({"status": status, "alive": alive, "group": group}))
