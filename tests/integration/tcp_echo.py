#!/usr/bin/env python3
"""TCP echo over 127.0.0.1 for the integration tests.

  tcp_echo.py server MODE PORTFILE   serve one client, then exit
      MODE: epoll (selectors.EpollSelector), poll (selectors.PollSelector),
            select (selectors.SelectSelector) or blocking (plain recv/sendall)
      The listening port (chosen by the kernel) is written to PORTFILE.
  tcp_echo.py client PORT MIB        send MIB MiB of random bytes, read the
      echo back, and exit 0 only if sha256(sent) == sha256(echoed)
"""
import hashlib
import os
import selectors
import socket
import sys
import threading

CHUNK = 256 * 1024


def listen_socket(portfile):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.getsockname()[1])
    os.rename(tmp, portfile)  # the test waits for the file: make it appear whole
    return srv


def serve_blocking(conn):
    total = 0
    while True:
        data = conn.recv(CHUNK)
        if not data:
            return total
        conn.sendall(data)
        total += len(data)


def serve_selector(conn, selector_class):
    """Non-blocking echo driven by a selector: data not yet written back
    waits in `pending` and we only ask for EVENT_WRITE while it is there."""
    conn.setblocking(False)
    sel = selector_class()
    pending = bytearray()
    total = 0
    peer_done = False
    sel.register(conn, selectors.EVENT_READ)
    while not (peer_done and not pending):
        can_read = not peer_done and len(pending) < 4 * CHUNK
        wanted = (selectors.EVENT_READ if can_read else 0) | (selectors.EVENT_WRITE if pending else 0)
        sel.modify(conn, wanted)
        events = sel.select(timeout=20)
        if not events:
            raise TimeoutError("no progress for 20 s")
        for _, mask in events:
            if mask & selectors.EVENT_READ:
                try:
                    data = conn.recv(CHUNK)
                except BlockingIOError:
                    data = None
                if data == b"":
                    peer_done = True
                elif data:
                    pending += data
                    total += len(data)
            if mask & selectors.EVENT_WRITE and pending:
                try:
                    sent = conn.send(pending)
                    del pending[:sent]
                except BlockingIOError:
                    pass
    sel.close()
    return total


def server(mode, portfile):
    classes = {"epoll": getattr(selectors, "EpollSelector", None),
               "poll": getattr(selectors, "PollSelector", None),
               "select": selectors.SelectSelector}
    if mode != "blocking" and classes.get(mode) is None:
        sys.exit("unknown or unavailable mode %s" % mode)
    srv = listen_socket(portfile)
    srv.settimeout(30)
    conn, _ = srv.accept()
    conn.settimeout(None)
    if mode == "blocking":
        total = serve_blocking(conn)
    else:
        total = serve_selector(conn, classes[mode])
    conn.close()
    srv.close()
    print("server(%s): echoed %d bytes" % (mode, total))


def client(port, mib):
    payload_len = mib * 1024 * 1024
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent_hash = hashlib.sha256()
    errors = []

    def sender():
        try:
            left = payload_len
            while left:
                block = os.urandom(min(CHUNK, left))
                sent_hash.update(block)
                sock.sendall(block)
                left -= len(block)
            sock.shutdown(socket.SHUT_WR)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=sender)
    thread.start()
    echoed_hash = hashlib.sha256()
    received = 0
    buf = bytearray(CHUNK)
    while True:
        n = sock.recv_into(buf)
        if n == 0:
            break
        echoed_hash.update(memoryview(buf)[:n])
        received += n
    thread.join()
    sock.close()
    if errors:
        sys.exit("sender failed: %r" % errors[0])
    print("sent %d bytes sha256=%s" % (payload_len, sent_hash.hexdigest()))
    print("echo %d bytes sha256=%s" % (received, echoed_hash.hexdigest()))
    if received != payload_len or sent_hash.digest() != echoed_hash.digest():
        sys.exit("echo differs from what was sent")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "server":
        server(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "client":
        client(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
