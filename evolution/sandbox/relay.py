"""Relay 127.0.0.1:PORT to the egress socket, run CMD, exit with its code (from egress.py)."""
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def shut(sock, how):
    try:
        sock.shutdown(how)
    except OSError:
        pass


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                shut(dst, socket.SHUT_WR)
                return
            dst.sendall(data)
    except OSError:
        shut(src, socket.SHUT_RDWR)
        shut(dst, socket.SHUT_RDWR)


def relay(conn, path):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
        back = threading.Thread(target=pump, args=(up, conn), daemon=True)
        back.start()
        pump(conn, up)
        back.join()
    except OSError as exc:
        sys.stderr.write("egress relay: cannot reach %s: %s\n" % (path, exc))
    finally:
        conn.close()
        up.close()


def serve(listener, path):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            time.sleep(0.1)
            continue
        threading.Thread(target=relay, args=(conn, path), daemon=True).start()


def main(argv):
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.stderr.write("usage: relay.py --port PORT --socket PATH -- CMD [ARGS...]\n")
        return 125
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="relay.py")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    opts = parser.parse_args(argv[:split])
    child, pending = [], []

    def forward(signum, frame):
        if child:
            child[0].send_signal(signum)
        else:
            pending.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", opts.port))
        listener.listen(128)
    except OSError as exc:
        sys.stderr.write("egress relay: cannot listen on 127.0.0.1:%d: %s\n" % (opts.port, exc))
        return 125
    threading.Thread(target=serve, args=(listener, opts.socket), daemon=True).start()
    try:
        proc = subprocess.Popen(argv[split + 1:])
    except OSError as exc:
        sys.stderr.write("egress relay: cannot start %s: %s\n" % (argv[split + 1], exc))
        return 127
    child.append(proc)
    for signum in pending:
        proc.send_signal(signum)
    code = proc.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: relay threads may sit in blocking calls, and the command's end is the relay's end.
    os._exit(status)
