import os, pty, signal, sys, time
start = time.monotonic()
pid, fd = pty.fork()
if pid == 0:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk: break
    out += chunk
_, status = os.waitpid(pid, 0)
sys.stderr.write("%.3f" % (time.monotonic() - start))
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
