"""The bounded HTTP plumbing under ``serve``: JSON refusals, the connection bound, the
request deadline and quiet disconnects, on a tiny handler over real sockets (127.0.0.1)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from gnn_treelstm.commands import http as H

LOG = logging.getLogger("tests.http_server")


class Echo(H.JsonHandler):
    """``/echo``: the body (POST) or the query (GET) back; ``/fail``: a bug."""

    routes = {"/echo": ("GET", "POST"), "/fail": ("GET",)}
    pages_hint = "/echo"
    server_version = "echo-test"
    max_body = 64

    def answer(self, url) -> None:
        if url.path == "/fail":
            raise KeyError("a bug")
        if self.command == "GET":
            self.request_read()
            if url.query == "bad":
                raise H.BadRequest("bad query: give another")
            self.json(200, {"echo": url.query})
        else:
            self.json(200, {"echo": self.body()})


class Server(H.BoundedServer):
    log = LOG


class Served:
    def __init__(self, **limits) -> None:
        self.server = Server(("127.0.0.1", 0), Echo, **limits)
        self.address = self.server.server_address[:2]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def served():
    s = Served(timeout=0.5, max_connections=2)
    yield s
    s.stop()


def exchange(address, data: bytes, *, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of bytes sent on a plain socket."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines)}
    return int(status_line.split()[1]), headers, body


def get(address, target: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return exchange(address, f"{method} {target} HTTP/1.0\r\n\r\n".encode())


def test_answers_and_refusals_are_json(served, caplog):
    caplog.set_level(logging.INFO, logger=LOG.name)
    a = served.address
    status, headers, body = get(a, "/echo?x=1")
    assert (status, json.loads(body)) == (200, {"echo": "x=1"})
    assert headers["content-type"] == "application/json; charset=utf-8"
    status, _, body = get(a, "/echo?bad")
    assert (status, json.loads(body)) == (400, {"error": "bad query: give another"})
    status, _, body = get(a, "/nowhere")
    assert (status, json.loads(body)) == (404, {"error": "no page /nowhere; try /echo"})
    status, headers, body = get(a, "/fail", "DELETE")
    assert status == 405 and headers["allow"] == "GET"
    assert json.loads(body) == {"error": "DELETE is not answered at /fail: use GET"}
    status, headers, body = get(a, "/echo", "HEAD")
    assert status == 405 and body == b""  # no body for HEAD, the header still says why
    status, _, body = get(a, "/fail")
    assert status == 500
    assert json.loads(body) == {"error": "internal error (KeyError); see the server log"}
    assert any(r.exc_info for r in caplog.records)  # the traceback goes to the log only
    status, _, body = exchange(a, b"GET /echo HTTP/1.0\r\nX: " + b"x" * 70000 + b"\r\n\r\n")
    assert status == 431 and json.loads(body)["error"] and b"<html" not in body.lower()


def test_bodies_are_bounded_and_read_whole(served):
    a = served.address
    status, _, body = exchange(a, b"POST /echo HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")
    assert (status, json.loads(body)) == (200, {"echo": "hello"})
    status, _, body = exchange(a, b"POST /echo HTTP/1.0\r\nContent-Length: 65\r\n\r\n" +
                               b"x" * 65)
    assert status == 400 and "the limit is 64" in json.loads(body)["error"]
    status, _, body = exchange(a, b"POST /echo HTTP/1.0\r\n\r\n")
    assert status == 400 and "Content-Length" in json.loads(body)["error"]
    status, _, body = exchange(a, b"POST /echo HTTP/1.0\r\nContent-Length: 2\r\n\r\n\xff\xfe")
    assert status == 400 and "not UTF-8" in json.loads(body)["error"]


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (what it sent is read and dropped)."""
    t0 = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - t0


def test_a_dripping_client_is_closed_at_the_deadline(served):
    drip = socket.create_connection(served.address)
    drip.sendall(b"GET /echo HTTP/1.0\r\n")
    t0 = time.monotonic()
    for _ in range(30):  # a byte every 0.1 s: each read in time, the request not
        try:
            drip.sendall(b"X")
        except OSError:
            break
        time.sleep(0.1)
    assert time.monotonic() - t0 < 2.5
    assert closed_within(drip, 5) is not None
    drip.close()


def test_connections_beyond_the_bound_get_a_quick_503(served, caplog):
    caplog.set_level(logging.WARNING, logger=LOG.name)
    held = [socket.create_connection(served.address) for _ in range(2)]
    try:
        time.sleep(0.1)  # both accepted and holding their slots
        t0 = time.monotonic()
        status, headers, body = get(served.address, "/echo")
        assert time.monotonic() - t0 < 0.5
        assert status == 503 and headers["retry-after"] == "1"
        assert headers["server"] == "echo-test"
        assert "--max-connections" in json.loads(body)["error"]
        assert "answered 503" in caplog.text
        for sock in held:  # they time out and free their slots
            assert closed_within(sock, 5) is not None
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while get(served.address, "/echo")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_client_gone_mid_body_is_one_debug_line(served, caplog):
    caplog.set_level(logging.DEBUG, logger=LOG.name)
    with socket.create_connection(served.address) as sock:
        sock.sendall(b"POST /echo HTTP/1.0\r\nContent-Length: 50\r\n\r\nabc")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00"
                        b"\x00\x00")  # close with a reset
    deadline = time.monotonic() + 5
    while not any("client gone" in r.getMessage() or "passed --timeout" in r.getMessage()
                  for r in caplog.records):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert all(r.levelno <= logging.INFO and not r.exc_info for r in caplog.records)
    assert get(served.address, "/echo")[0] == 200


def test_bad_limits_name_the_flag():
    with pytest.raises(ValueError, match="--timeout"):
        H.BoundedServer(("127.0.0.1", 0), Echo, timeout=0)
    with pytest.raises(ValueError, match="--max-connections"):
        H.BoundedServer(("127.0.0.1", 0), Echo, max_connections=0)
