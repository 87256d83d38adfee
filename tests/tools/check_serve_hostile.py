#!/usr/bin/env python3
"""`eaglevk serve` under hostile traffic on loopback, with the bundled tiny model.

Against one server (--max-body-mib 1, --max-connections 64, --io-timeout 30): 200 slowloris
sockets (more than the connection cap: idle ones must give way), a 48 MiB chunked body, a
24 MiB header flood, a POST without a length, bad lengths, and a client that leaves in the
middle of a long non-streamed request. Each is answered with its status (or, for the client that
left, its decoding stops), a normal request is still answered while the slowloris sockets are
open, and the server's resident memory (VmRSS and its peak VmHWM in /proc/PID/status) grows by
less than RSS_BOUND_MIB over the floods. Then: a second SIGTERM ends a server at once (status 130) while
a request is decoding; a second server on a port in use, and an empty --api-key or
EAGLEVK_API_KEY, are refused by name before a model loads.

Timeouts are generous (the test machine is shared); what is checked is what happens, not how
fast.

  check_serve_hostile.py EAGLEVK ASSETS
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

RSS_BOUND_MIB = 40  # the 48 MiB chunked body alone held 69 MiB more before the front bounded it
failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


class Server:
    def __init__(self, cli, args, env=None):
        self.log = []
        self.proc = subprocess.Popen([cli, "serve", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "LP_NUM_THREADS": "0", **(env or {})}, text=True, errors="replace")
        self.port = None
        listening = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                sys.stderr.write("[serve] " + line)
                m = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    listening.set()
            listening.set()

        threading.Thread(target=read, daemon=True).start()
        listening.wait(180)

    def memory_mib(self, field):
        """VmRSS (resident now) or VmHWM (the most resident since reset_peak)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1)) / 1024

    def reset_peak(self):
        # Freed request buffers leave VmRSS at once: only the peak shows what was held.
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
            f.write("5")

    def request(self, method, path, body=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"} if body is not None else {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def metric(self, name):
        _, page = self.request("GET", "/metrics")
        m = re.search(rf"^eaglevk_{name} (\S+)$", page.decode(), re.M)
        return float(m.group(1)) if m else 0.0


def completion(max_tokens, **extra):
    return {"model": "tiny-llama3", "prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0, **extra}


def raw_exchange(port, send, seconds=60):
    """Sends what `send(sock)` writes (it may fail once the server closes) while reading the
    answer on another thread; returns the status of the answer, or None without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    answer = bytearray()

    def reader():
        try:
            while chunk := s.recv(65536):
                answer.extend(chunk)
        except OSError:
            pass

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        send(s)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the server refused and closed before all was sent: its answer is what counts
    t.join(seconds)
    s.close()
    m = re.match(rb"HTTP/1\.1 (\d+) ", bytes(answer))
    return int(m.group(1)) if m else None


def hostile(cli, assets):
    server = Server(cli, ["-m", f"{assets}/tiny-llama3", "--host", "127.0.0.1", "--port", "0", "--max-body-mib", "1",
                          "--max-connections", "64", "--io-timeout", "30", "--parallel", "2"])
    if not check(server.port is not None, "the server listens"):
        return
    status, _ = server.request("POST", "/v1/completions", completion(4))
    check(status == 200, f"a normal request before the floods: 200, got {status}")
    rss_before = server.memory_mib("VmRSS")
    server.reset_peak()

    # Slowloris: 200 sockets, each with half a request head, more than --max-connections.
    slow = []
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    time.sleep(1)
    status, body = server.request("POST", "/v1/completions", completion(4), timeout=90)
    check(status == 200, f"a normal request with 200 slowloris sockets open: 200, got {status} {body[:200]}")
    status, _ = server.request("GET", "/health", timeout=90)
    check(status == 200, f"/health with 200 slowloris sockets open: 200, got {status}")

    # A 48 MiB chunked body against --max-body-mib 1.
    def chunked(s):
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"%x\r\n%s\r\n" % (1 << 20, b"a" * (1 << 20))
        for _ in range(48):
            s.sendall(piece)
        s.sendall(b"0\r\n\r\n")
    status = raw_exchange(server.port, chunked)
    check(status == 413, f"a 48 MiB chunked body: 413, got {status}")

    # A Content-Length body over the limit is refused before it is read.
    status = raw_exchange(server.port, lambda s: s.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50331648\r\n\r\n" + b"a" * (4 << 20)))
    check(status == 413, f"a 48 MiB Content-Length: 413, got {status}")

    # 24 MiB of headers.
    def header_flood(s):
        s.sendall(b"GET /health HTTP/1.1\r\n")
        line = b"X-Flood: " + b"a" * 1000 + b"\r\n"
        for _ in range(24 * 1024):
            s.sendall(line)
    status = raw_exchange(server.port, header_flood)
    check(status == 431, f"24 MiB of headers: 431, got {status}")
    many = b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(1000)) + b"\r\n"
    status = raw_exchange(server.port, lambda s: s.sendall(many))
    check(status == 431, f"1000 short headers: 431, got {status}")

    # Framing.
    status = raw_exchange(server.port, lambda s: s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n{}"))
    check(status == 411, f"a POST without a length: 411, got {status}")
    for length in [b"-1", b"100000000000000000000000", b"ten", b"1 2"]:
        status = raw_exchange(server.port, lambda s: s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n"), seconds=20)
        check(status == 400, f"Content-Length {length.decode()}: 400 at once, got {status}")

    # A client that leaves in the middle of a long non-streamed request: its decoding stops.
    cancelled = server.metric("sequences_cancelled_total")
    generated = server.metric("generated_tokens_total")
    body = json.dumps(completion(1500, ignore_eos=True)).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    time.sleep(3)
    s.close()
    deadline = time.time() + 60
    while time.time() < deadline and server.metric("sequences_cancelled_total") == cancelled:
        time.sleep(0.5)
    check(server.metric("sequences_cancelled_total") == cancelled + 1,
          "a client that left a non-streamed request: its sequence is cancelled")
    made = server.metric("generated_tokens_total") - generated
    check(made < 1500, f"a client that left a non-streamed request: {made:.0f} of its 1500 tokens decoded")
    check(any(" 499 " in line for line in server.log), "the request of the client that left is logged (499)")

    status, body = server.request("POST", "/v1/completions", completion(4), timeout=90)
    check(status == 200, f"a normal request after the floods: 200, got {status}")
    check(any(re.search(r"POST /v1/completions 200 \d+ tokens [\d.]+ s", line) for line in server.log),
          "each request is logged in one line (method, path, status, tokens, time)")
    grown = server.memory_mib("VmRSS") - rss_before
    peak = server.memory_mib("VmHWM") - rss_before
    check(peak < RSS_BOUND_MIB and grown < RSS_BOUND_MIB,
          f"resident memory over the floods: at most {peak:.1f} MiB more, {grown:.1f} MiB more after (bound {RSS_BOUND_MIB})")
    for s in slow:
        s.close()
    server.proc.send_signal(signal.SIGTERM)
    check(server.proc.wait(60) == 0, "SIGTERM stops the server (status 0)")


def second_signal(cli, assets):
    server = Server(cli, ["-m", f"{assets}/tiny-llama3", "--host", "127.0.0.1", "--port", "0"])
    if not check(server.port is not None, "the second-signal server listens"):
        return
    answered = []

    def long_request():
        try:
            answered.append(server.request("POST", "/v1/completions", completion(1800, ignore_eos=True), timeout=300))
        except (OSError, http.client.HTTPException):
            pass  # the server ended under it: what the second signal is for

    threading.Thread(target=long_request, daemon=True).start()
    deadline = time.time() + 60
    while time.time() < deadline and server.metric("sequences_running") == 0:
        time.sleep(0.2)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    check(server.proc.poll() is None, "the first SIGTERM lets the request under way finish")
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(15)
    except subprocess.TimeoutExpired:
        code = None
        server.proc.kill()
    check(code == 130 and not answered, f"a second SIGTERM ends the server at once (status 130), got {code}")


def refused_at_start(cli, assets):
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    cases = [(["--port", str(port)], {}, "in use"),
             (["--port", "0", "--api-key", ""], {}, "--api-key is empty"),
             (["--port", "0"], {"EAGLEVK_API_KEY": ""}, "EAGLEVK_API_KEY is set but empty")]
    for args, env, words in cases:
        r = subprocess.run([cli, "serve", "-m", f"{assets}/tiny-llama3", "--host", "127.0.0.1", *args],
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
        check(r.returncode != 0 and words in r.stderr, f"{' '.join(args)} {env or ''}: refused, naming '{words}' "
              f"(status {r.returncode}: {r.stderr.strip()[-200:]})")
    holder.close()
    # Another eaglevk serve on the port: refused too (a server's socket takes no SO_REUSEPORT).
    first = Server(cli, ["-m", f"{assets}/tiny-llama3", "--host", "127.0.0.1", "--port", "0"])
    if check(first.port is not None, "a first server listens"):
        r = subprocess.run([cli, "serve", "-m", f"{assets}/tiny-llama3", "--host", "127.0.0.1", "--port", str(first.port)],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode != 0 and "in use" in r.stderr, f"a second eaglevk serve on port {first.port}: refused "
              f"(status {r.returncode}: {r.stderr.strip()[-200:]})")
        first.proc.send_signal(signal.SIGTERM)
        first.proc.wait(60)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_serve_hostile.py EAGLEVK ASSETS")
    cli, assets = sys.argv[1:]
    refused_at_start(cli, assets)
    hostile(cli, assets)
    second_signal(cli, assets)
    if failures:
        print(f"check_serve_hostile: {len(failures)} check(s) failed")
        sys.exit(1)
    print("check_serve_hostile: every check passed")


if __name__ == "__main__":
    main()
