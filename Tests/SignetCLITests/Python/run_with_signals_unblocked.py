import signal, subprocess, sys, time
def reset():
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
import os
writer = os.open(sys.argv[1], os.O_RDWR)   # a writer that never writes: the reader waits
p = subprocess.Popen(sys.argv[2:], preexec_fn=reset, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
# Interrupt once the command holds the FIFO open (it is then waiting in its read): a
# fixed sleep was too short for a sanitizer build on a loaded machine.
target = os.path.realpath(sys.argv[1])
deadline = time.monotonic() + 120
def waiting():
    try:
        return any(os.readlink(f"/proc/{p.pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{p.pid}/fd"))
    except OSError:
        return False
while not waiting() and p.poll() is None and time.monotonic() < deadline:
    time.sleep(0.01)
p.send_signal(signal.SIGINT)
_, err = p.communicate()
print(p.returncode)
sys.stdout.write(err.decode())
