"""``gnn-treelstm serve`` under load, on 127.0.0.1 only: concurrent clients posting
sentences while others connect and stall.

The server runs as its own process (``python -m gnn_treelstm serve RUN --port 0``) so that
its resident memory and thread count are its own (``/proc/PID/status``). Every well-formed
request must be answered 200, every stalled connection closed by the server after
``--timeout``, the server's threads must come back to their idle count, and its resident
memory may grow by at most :data:`RSS_GROWTH_MIB` over the load.

The test runs a scaled-down figure; the full one (the numbers in ``docs/serve.md``)::

    python -m tests.commands.test_serve_load --requests 2000 --clients 50 --stallers 50
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.commands.test_serve import require_spacy, tiny_sample_run

#: the most the server's resident memory may grow over a load run (it holds no per-request
#: state: what it parses and predicts is freed with the request)
RSS_GROWTH_MIB = 64
#: sentences the clients send, round-robin (a fixed set: spaCy's string store stays put)
SENTENCES = ["The film is a gorgeous , witty and moving story .", "a dull , lifeless film",
             "It is not a bad movie at all .", "An utterly charming and hilarious film ."]
REPO = Path(__file__).resolve().parents[2]


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` / ``VmHWM`` (KiB) and ``Threads`` of a process, from ``/proc``."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    return out


class Server:
    """``gnn-treelstm serve RUN`` in a child process, on a free port of 127.0.0.1."""

    def __init__(self, run: Path, log: Path, *, timeout: float, max_connections: int):
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gnn_treelstm", "serve", str(run), "--host", "127.0.0.1",
             "--port", "0", "--timeout", str(timeout), "--max-connections",
             str(max_connections), "--threads", "1"],
            stdout=subprocess.PIPE, stderr=self.log, cwd=REPO, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.proc.stdout.readline()),
                         daemon=True).start()
        try:
            line = lines.get(timeout=180)  # torch, the model and spaCy load first
        except queue.Empty:
            self.stop()
            raise RuntimeError("serve did not start within 180 s") from None
        if not line.startswith("serving "):
            self.stop()
            raise RuntimeError(f"serve did not start: {line!r}; see {log}")
        port = int(line.rsplit(":", 1)[1])
        self.address = ("127.0.0.1", port)
        self.max_connections = max_connections

    def status(self) -> dict[str, int]:
        return proc_status(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def post(address: tuple[str, int], sentence: str, timeout: float = 60) -> tuple[int, float]:
    """(status, seconds) of one ``POST /api/predict`` on a new connection."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request("POST", "/api/predict", json.dumps({"sentence": sentence}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status == 200:
            json.loads(body)["label"]  # noqa: B018 - a whole answer, not a cut one
        return resp.status, time.perf_counter() - t0
    finally:
        conn.close()


def stall(address: tuple[str, int], how: int, timeout: float, out: list) -> None:
    """Connect and stall (silent, half a request, or a body cut short); appends the
    seconds until the server closed the connection, or None if it never did."""
    with socket.create_connection(address, timeout=30) as sock:
        t0 = time.monotonic()
        if how == 1:
            sock.sendall(b"POST /api/predict HTTP/1.1\r\nHost: x\r\n")
        elif how == 2:
            sock.sendall(b"POST /api/predict HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"s")
        sock.settimeout(timeout * 3 + 5)
        try:
            while sock.recv(65536):
                pass
            out.append(time.monotonic() - t0)
        except TimeoutError:
            out.append(None)
        except ConnectionResetError:
            out.append(time.monotonic() - t0)


def load(server: Server, *, requests: int, clients: int, stallers: int,
         timeout: float) -> dict:
    """Run the load; returns the measurements (see :func:`report`)."""
    for s in SENTENCES:  # warm: the first prediction of each sentence shape
        assert post(server.address, s)[0] == 200
    time.sleep(0.5)
    before = server.status()
    closed: list = []
    done = threading.Event()

    def staller(how: int) -> None:  # stalls again as soon as the server closes it
        while not done.is_set():
            stall(server.address, how, timeout, closed)

    peak = dict(before)

    def sample() -> None:  # the server's threads and memory while loaded
        while not done.is_set():
            st = server.status()
            peak.update({k: max(peak[k], st[k]) for k in ("Threads", "VmRSS")})
            time.sleep(0.05)

    stall_threads = [threading.Thread(target=staller, args=(i % 3,)) for i in range(stallers)]
    stall_threads.append(threading.Thread(target=sample))
    for t in stall_threads:
        t.start()

    jobs: queue.Queue[int] = queue.Queue()
    for i in range(requests):
        jobs.put(i)
    results: list[tuple[int, float]] = []
    errors: list[str] = []

    def client() -> None:
        while True:
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                results.append(post(server.address, SENTENCES[i % len(SENTENCES)]))
            except Exception as exc:  # noqa: BLE001 - counted and shown, not raised
                errors.append(f"{type(exc).__name__}: {exc}")

    t0 = time.perf_counter()
    workers = [threading.Thread(target=client) for _ in range(clients)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    seconds = time.perf_counter() - t0
    done.set()
    for t in stall_threads:
        t.join()
    deadline = time.monotonic() + 10  # the last handler threads end
    while server.status()["Threads"] > before["Threads"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = server.status()
    lat = sorted(x for status, x in results if status == 200)
    statuses: dict[int, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [float("nan")] * 99
    return {"requests": requests, "clients": clients, "stallers": stallers,
            "timeout": timeout, "seconds": seconds, "statuses": statuses, "errors": errors,
            "requests_per_s": len(results) / seconds, "p50_ms": 1000 * q[49],
            "p99_ms": 1000 * q[98], "max_ms": 1000 * lat[-1] if lat else float("nan"),
            "stalled_closed_s": closed, "rss_before_kib": before["VmRSS"],
            "rss_after_kib": after["VmRSS"], "rss_peak_kib": peak["VmRSS"],
            "threads_idle": before["Threads"], "threads_peak": peak["Threads"],
            "threads_after": after["Threads"], "max_connections": server.max_connections}


def check(m: dict) -> None:
    """What the load must show (the assertions of the test and of the script)."""
    assert not m["errors"], m["errors"][:5]
    assert m["statuses"] == {200: m["requests"]}, m["statuses"]
    assert len(m["stalled_closed_s"]) >= m["stallers"]
    assert all(s is not None and s < m["timeout"] + 5 for s in m["stalled_closed_s"]), \
        m["stalled_closed_s"]
    assert m["threads_peak"] >= m["threads_idle"] + m["stallers"] // 2, \
        "the stallers were not holding connections while the clients ran"
    assert m["threads_peak"] <= m["threads_idle"] + m["max_connections"], m["threads_peak"]
    assert m["threads_after"] <= m["threads_idle"], (m["threads_idle"], m["threads_after"])
    growth = (m["rss_after_kib"] - m["rss_before_kib"]) / 1024
    assert growth < RSS_GROWTH_MIB, f"resident memory grew by {growth:.0f} MiB"


def report(m: dict) -> str:
    closed = [s for s in m["stalled_closed_s"] if s is not None]
    return (f"{m['requests']} requests from {m['clients']} clients, {m['stallers']} stalled "
            f"connections (--timeout {m['timeout']:g}): {m['seconds']:.1f} s, "
            f"{m['requests_per_s']:.0f} requests/s, latency p50 {m['p50_ms']:.0f} ms, "
            f"p99 {m['p99_ms']:.0f} ms, max {m['max_ms']:.0f} ms; statuses {m['statuses']}; "
            f"{len(closed)} stalls closed by the server after {min(closed, default=0):.1f}-"
            f"{max(closed, default=0):.1f} s; server RSS {m['rss_before_kib'] / 1024:.0f} MiB "
            f"before, {m['rss_after_kib'] / 1024:.0f} MiB after (peak under load "
            f"{m['rss_peak_kib'] / 1024:.0f} MiB); server threads {m['threads_idle']} idle, "
            f"{m['threads_peak']} at most, {m['threads_after']} after")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc")
def test_load_with_stalled_clients(tmp_path_factory, tmp_path):
    require_spacy()
    run = tiny_sample_run(tmp_path_factory)
    server = Server(run, tmp_path / "serve.log", timeout=2, max_connections=64)
    try:
        m = load(server, requests=300, clients=20, stallers=20, timeout=2)
    finally:
        server.stop()
    print(report(m))
    check(m)
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-2000:]


def main(argv: list[str] | None = None) -> int:
    """The full figure as a script: trains the tiny model into --work, serves it, loads it."""
    ap = argparse.ArgumentParser(prog="python -m tests.commands.test_serve_load",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--stallers", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=2.0, help="serve --timeout")
    ap.add_argument("--max-connections", type=int, default=128)
    ap.add_argument("--work", type=Path, default=Path("out/serve_load"),
                    help="where the tiny model is trained (kept between runs)")
    a = ap.parse_args(argv)

    class _Factory:  # tiny_sample_run's tmp_path_factory, on a fixed folder
        def getbasetemp(self) -> Path:
            return a.work

    run = tiny_sample_run(_Factory())
    log = a.work / "serve.log"
    server = Server(run, log, timeout=a.timeout, max_connections=a.max_connections)
    try:
        m = load(server, requests=a.requests, clients=a.clients, stallers=a.stallers,
                 timeout=a.timeout)
    finally:
        server.stop()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores; python {sys.version.split()[0]}")
    print(report(m))
    check(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
