#!/usr/bin/env python3
"""What any local user gets from a node's kubelet port (edgecore's or Wedge's).

Run it as the user to test (e.g. `setpriv --reuid 65534 --regid 65534 --clear-groups
python3 tests/benches/kubelet_port_probe.py --pod default/web/app`) against a node that runs
the pod. Prints one line per attempt: exec and attach (WebSocket upgrade, as kubectl >= 1.30
asks), logs, stats, and whether /healthz still answers while 70 idle sockets are open.
Exit status 0 always: it reports, the reader judges.
"""

import argparse
import base64
import os
import socket
import time


def request(addr, head, read_for=3.0):
    """Sends `head`, returns (status line, everything read within `read_for` s)."""
    with socket.create_connection(addr, timeout=read_for) as s:
        s.sendall(head.encode())
        data = b""
        deadline = time.monotonic() + read_for
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
    status = data.split(b"\r\n", 1)[0].decode(errors="replace")
    return status, data


def printable(data):
    """The readable runs (4+ characters) after the response head: what the command wrote."""
    body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
    runs, run = [], b""
    for byte in body:
        if 32 <= byte < 127:
            run += bytes([byte])
        else:
            if len(run) >= 4:
                runs.append(run.decode())
            run = b""
    if len(run) >= 4:
        runs.append(run.decode())
    return " ".join(runs)[:120] or "-"


def upgrade_head(path):
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
        f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=10350)
    parser.add_argument("--pod", required=True, help="namespace/pod/container")
    parser.add_argument("--file", default="/etc/shadow", help="a root-only file to read by exec")
    parser.add_argument("--env", default="HOSTNAME", help="an environment variable to read by exec")
    args = parser.parse_args()
    addr = ("127.0.0.1", args.port)
    ns, pod, container = args.pod.split("/")
    print(f"uid {os.getuid()} against 127.0.0.1:{args.port}, pod {args.pod}")

    for what, command in [
        (f"cat {args.file}", f"command=cat&command={args.file}"),
        (f"echo ${args.env}", f"command=sh&command=-c&command=echo%20%24{args.env}"),
    ]:
        status, data = request(
            addr, upgrade_head(f"/exec/{ns}/{pod}/{container}?{command}&output=1&error=1")
        )
        print(f"exec {what}: {status!r}; output: {printable(data)!r}")
    status, _ = request(addr, upgrade_head(f"/attach/{ns}/{pod}/{container}?output=1&error=1"))
    print(f"attach: {status!r}")
    status, data = request(
        addr, f"GET /containerLogs/{ns}/{pod}/{container} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    print(f"logs  : {status!r}; {len(data)} bytes")
    for path in ["/stats/summary", "/metrics/resource", "/healthz"]:
        status, data = request(addr, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        print(f"{path}: {status!r}; {len(data)} bytes")

    idle = [socket.create_connection(addr) for _ in range(70)]
    time.sleep(0.5)
    started = time.monotonic()
    try:
        status, _ = request(addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 15)
    except OSError as e:
        status = f"error {e}"
    took = time.monotonic() - started
    print(f"/healthz with 70 idle sockets open: {status!r} after {took:.2f} s")
    for s in idle:
        s.close()


if __name__ == "__main__":
    main()
