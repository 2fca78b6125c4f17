"""Bounded HTTP plumbing under ``gnn-treelstm serve`` (:mod:`gnn_treelstm.commands.serve`).

Standard library only. :class:`BoundedServer` is a
:class:`~http.server.ThreadingHTTPServer` that a client cannot hold: at most
``max_connections`` connections are served at once (one thread each; a connection beyond
that gets an immediate 503 and no thread), and a client has ``timeout`` seconds to send its
request and again to take the answer (a socket timeout on every read and write, and a
deadline on the whole request that a watchdog thread enforces, so a client sending a byte
now and then cannot hold a thread either). :class:`JsonHandler` answers every request in
JSON, refusals included: 404 for a path outside its ``routes``, 405 with ``Allow`` for a
method a route does not answer (``PUT``, ``DELETE``, ...), :class:`BadRequest` as its
status with ``{"error": message}``, http.server's own 400/414/431, and a 500 with a short
message for anything else (the traceback goes to the log only). A client that disconnects
mid-request or mid-answer is one debug line in the server's log, never a traceback.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import SplitResult, urlsplit

__all__ = ["BadRequest", "UnsupportedMediaType", "JsonHandler", "BoundedServer",
           "DISCONNECTS", "MAX_BODY", "DEFAULT_TIMEOUT", "MAX_CONNECTIONS"]

MAX_BODY = 64 * 1024    # bytes of a request body
DEFAULT_TIMEOUT = 30.0  # seconds a client has to send its request (serve --timeout)
MAX_CONNECTIONS = 64    # connections served at once (serve --max-connections)
LINGER = 1.0            # seconds a refused (503) socket stays open for its answer to arrive

#: errors of a client that went away or stalled: logged at debug level, one line
DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class BadRequest(ValueError):
    """Input the server answers with HTTP 400 (``status``)."""

    status = 400


class UnsupportedMediaType(BadRequest):
    """A request body of a type the server does not read (HTTP 415)."""

    status = 415


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler whose every answer is JSON (see the module docstring).

    Subclasses set :attr:`routes` (path -> the methods it answers) and implement
    :meth:`answer`, called for a route and one of its methods only.
    """

    server: BoundedServer
    #: path -> the methods answered there (any other method: 405 with ``Allow``)
    routes: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: what the 404 suggests instead of an unknown path
    pages_hint: ClassVar[str] = "/"
    max_body: ClassVar[int] = MAX_BODY

    def answer(self, url: SplitResult) -> None:
        """Answer a request for one of :attr:`routes` with one of its methods."""
        raise NotImplementedError

    def method_hint(self, path: str) -> str:
        """What a 405 at ``path`` adds after the allowed methods (default: nothing)."""
        return ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class name
        self.server.log.info("%s %s", self.address_string(), format % args)

    def __getattr__(self, name: str) -> Any:
        # http.server answers a method without a ``do_<METHOD>`` with its HTML 501 page;
        # every method is routed here, and one a route does not answer gets a JSON 405
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _handle(self) -> None:
        url = urlsplit(self.path)
        try:
            self._route(url)
        except DISCONNECTS as exc:  # the client went away or stalled: nobody to answer
            self.close_connection = True
            self.server.log.debug("%s %s %s: client gone (%s: %s)", self.address_string(),
                                  self.command, url.path, type(exc).__name__, exc)

    def _route(self, url: SplitResult) -> None:
        log = self.server.log
        try:
            if self.command not in self.routes.get(url.path, ()):
                self.not_allowed()
            else:
                self.answer(url)
        except BadRequest as exc:
            log.info("%d %s: %s", exc.status, url.path, exc)
            self.json(exc.status, {"error": str(exc)})
        except DISCONNECTS:
            raise
        except Exception as exc:  # the client gets a message, the log the traceback
            log.exception("request %s %s failed", self.command, url.path)
            self.json(500, {"error": f"internal error ({type(exc).__name__}); see the "
                                     "server log"})

    # ---- answers
    def send(self, status: int, body: str, ctype: str,
             headers: Sequence[tuple[str, str]] = ()) -> None:
        """Answer ``body`` as ``ctype`` in UTF-8 (no body for ``HEAD``)."""
        data = body.encode("utf-8")
        self.server.watch(self.connection)  # writing the answer has --timeout again
        self.send_response(status)
        self.send_header("Content-Type", f"{ctype}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def json(self, status: int, obj: dict, headers: Sequence[tuple[str, str]] = ()) -> None:
        """Answer ``obj`` as JSON."""
        self.send(status, json.dumps(obj, ensure_ascii=False), "application/json", headers)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, a header too long, ...)
        as JSON, like every other answer."""
        self.close_connection = True
        short = message or self.responses.get(code, ("error",))[0]
        self.log_error("code %d, message %s", code, short)
        self.json(code, {"error": short + (f": {explain}" if explain else "")})

    def not_allowed(self) -> None:
        """The 404 of a path outside :attr:`routes`, or the 405 of a method its route does
        not answer."""
        path = urlsplit(self.path).path
        if path not in self.routes:
            self.json(404, {"error": f"no page {path}; try {self.pages_hint}"})
            return
        allowed = ", ".join(self.routes[path])
        self.json(405, {"error": f"{self.command} is not answered at {path}: use "
                                 f"{allowed}{self.method_hint(path)}"}, [("Allow", allowed)])

    # ---- the request
    def request_read(self) -> None:
        """The request is in: no deadline while it is answered."""
        self.server.unwatch(self.connection)

    def body(self) -> str:
        """The request body as text (at most :attr:`max_body` bytes, all of
        Content-Length); the request is read after it (:meth:`request_read`)."""
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            raise BadRequest("a POST needs a Content-Length header") from None
        if not 0 <= length <= self.max_body:
            raise BadRequest(f"the request body is {length} bytes; the limit is "
                             f"{self.max_body}")
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise BadRequest(f"the request body ended after {len(raw)} of its {length} bytes "
                             "(Content-Length)")
        self.request_read()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("the request body is not UTF-8 text") from None


class BoundedServer(ThreadingHTTPServer):
    """:class:`~http.server.ThreadingHTTPServer` with bounds (see the module docstring):
    ``max_connections`` served at once, ``timeout`` seconds for a request. Its handler's
    messages go to :attr:`log`."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: bursts of connections wait, not drop
    #: where the server and its handlers log (a subclass names its command's logger)
    log: ClassVar[logging.Logger] = logging.getLogger(__name__)

    def __init__(self, address: tuple[str, int], handler: type[JsonHandler], *,
                 timeout: float = DEFAULT_TIMEOUT, max_connections: int = MAX_CONNECTIONS):
        if not timeout > 0:
            raise ValueError(f"--timeout must be positive, got {timeout}")
        if max_connections <= 0:
            raise ValueError(f"--max-connections must be positive, got {max_connections}")
        self.request_timeout, self.max_connections = timeout, max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._lingering: list[tuple[float, socket.socket]] = []
        self._closed = threading.Event()
        self._busy, self._busy_logged = 0, -1e9  # 503s not yet in a warning, its time
        super().__init__(address, handler)
        self._watchdog = threading.Thread(target=self._watch_loop, daemon=True,
                                          name="serve-watchdog")
        self._watchdog.start()

    # ---- the connection bound
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self.watch(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.unwatch(request)
            self._slots.release()

    def _refuse(self, request: socket.socket, client_address: Any) -> None:
        """The 503 for a connection beyond the bound, written from the accept loop (it fits
        the socket's send buffer); the socket is closed a moment later, once what the
        client sent has been read, so the answer is not lost to a reset."""
        self._busy += 1
        now = time.monotonic()
        if now - self._busy_logged >= 10:  # one warning per 10 s under a flood, not one each
            self.log.warning("%d connection(s) answered 503: %d are open "
                             "(serve --max-connections)", self._busy, self.max_connections)
            self._busy, self._busy_logged = 0, now
        body = json.dumps({"error": f"the server is busy: {self.max_connections} "
                                    "connections are open (serve --max-connections); "
                                    "try again"}).encode()
        head = (f"HTTP/1.0 503 Service Unavailable\r\n"
                f"Server: {self.RequestHandlerClass.server_version}\r\n"
                "Content-Type: application/json; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            request.setblocking(False)
            request.send(head.encode("ascii") + body)
            request.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self.log.debug("%s: the 503 was not sent (%s)", client_address[0], exc)
        with self._lock:
            if len(self._lingering) < 4 * self.max_connections:
                self._lingering.append((time.monotonic() + LINGER, request))
                return
        self._drain_and_close(request)

    @staticmethod
    def _drain_and_close(sock: socket.socket) -> None:
        try:
            sock.setblocking(False)
            while sock.recv(65536):
                pass
        except OSError:
            pass
        sock.close()

    # ---- the deadline
    def watch(self, sock: socket.socket) -> None:
        """Give ``sock`` ``timeout`` seconds from now (reading a request, writing an
        answer); past it the watchdog shuts the socket down."""
        with self._lock:
            self._deadlines[sock] = time.monotonic() + self.request_timeout

    def unwatch(self, sock: socket.socket) -> None:
        """No deadline for ``sock`` (while the request is answered)."""
        with self._lock:
            self._deadlines.pop(sock, None)

    def _watch_loop(self) -> None:
        tick = min(0.25, self.request_timeout / 4)
        while not self._closed.wait(tick):
            now = time.monotonic()
            with self._lock:
                late = [s for s, t in self._deadlines.items() if t < now]
                for s in late:
                    del self._deadlines[s]
                done = [s for t, s in self._lingering if t < now]
                self._lingering = [(t, s) for t, s in self._lingering if t >= now]
            for s in late:
                self.log.debug("a connection passed --timeout %gs; closing it",
                               self.request_timeout)
                try:
                    s.shutdown(socket.SHUT_RDWR)  # the handler's read or write ends now
                except OSError:
                    pass
            for s in done:
                self._drain_and_close(s)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is a debug line; anything else a logged traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, DISCONNECTS):
            self.log.debug("%s: client gone (%s: %s)", client_address[0],
                           type(exc).__name__, exc)
        else:
            self.log.exception("request from %s failed", client_address[0])

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()
        with self._lock:
            lingering, self._lingering = self._lingering, []
        for _, s in lingering:
            self._drain_and_close(s)
