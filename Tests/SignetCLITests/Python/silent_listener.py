import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    try:
        for _ in range(200):
            c.sendall(b"x"); time.sleep(0.5)
    except OSError:
        pass
    c.close()
