"""One bounded JSON POST for the teacher client: no redirects, a total deadline, a byte cap, abortable from any thread.

What: `BoundedPoster.post(url, body, headers, deadline_s=, max_bytes=)` returns `(status, headers, raw body)` or
raises `PostError(kind)`, kind one of: deadline, too_large, connection, aborted. `abort_all()` ends every request in
flight at once (Ctrl-C), and every later one before it starts.

Why: `urlopen`'s timeout bounds each socket read, not the request, so a server sending a byte a second holds a
worker forever; bodies were read whole; 301/302/303 were followed with the `Authorization` header; `http_proxy`
captured loopback requests. Here a watchdog timer shuts the socket down when the request's deadline passes (or on
abort), so a blocked read returns at once whatever the server does; the body is read in chunks up to `max_bytes`;
redirects come back as their status and are never followed; proxies from the environment (`https_proxy`,
`http_proxy`, `no_proxy`) are used except for loopback hosts, which are always reached directly.

How: urllib's opener with a redirect handler that follows nothing and connection classes that record their socket,
so the watchdog can reach it. Name resolution happens before the socket exists and is bounded by the resolver only.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

CHUNK_BYTES = 1 << 16


class PostError(Exception):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def is_loopback(host: str | None) -> bool:
    """True for localhost names and loopback addresses (127.0.0.0/8, ::1)."""
    if not host:
        return False
    if host.lower().rstrip(".") in ("localhost", "localhost.localdomain") or host.lower().endswith(
        ".localhost"
    ):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Watch:
    """The sockets of one request and whether its deadline or an abort ended it."""

    def __init__(self):
        self.sockets: list[socket.socket] = []
        self.ended: str | None = None
        self.lock = threading.Lock()

    def add(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.append(sock)
            if self.ended is None:
                return
        _shut(sock)

    def end(self, why: str) -> None:
        with self.lock:
            if self.ended is None:
                self.ended = why
            sockets = list(self.sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for TLS sockets: it wakes a read blocked in another thread and leaves the
    # TLS object alone (SSLSocket.shutdown would drop it under that thread's feet).
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watched(base: type, watch: _Watch):
    class Watched(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            create = self._create_connection

            def created(*a, **kw):  # watched from the start: a proxy's CONNECT is under the deadline too
                sock = create(*a, **kw)
                watch.add(sock)
                return sock

            self._create_connection = created

        def connect(self):
            super().connect()
            watch.add(self.sock)  # the TLS socket, which took over the plain one's descriptor

    return Watched


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 3xx comes back as an HTTPError with its own status


def _handlers(watch: _Watch, direct: bool) -> list:
    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(_watched(http.client.HTTPConnection, watch), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(_watched(http.client.HTTPSConnection, watch), req, context=self._context)

    proxies = urllib.request.ProxyHandler({} if direct else None)  # None: from the environment
    return [proxies, HTTP(), HTTPS(), _NoRedirect()]


class BoundedPoster:
    """POSTs with a total deadline and a byte cap; `abort_all()` ends them all (see module docstring)."""

    def __init__(self):
        self.live: set[_Watch] = set()
        self.aborted = threading.Event()
        self.lock = threading.Lock()

    def abort_all(self) -> None:
        self.aborted.set()
        with self.lock:
            watches = list(self.live)
        for watch in watches:
            watch.end("aborted")

    def post(
        self, url: str, body: bytes, headers: dict[str, str], *, deadline_s: float, max_bytes: int
    ) -> tuple[int, http.client.HTTPMessage | None, bytes]:
        """(status, headers, body); a non-2xx status returns with an empty body. Raises PostError."""
        watch = _Watch()
        timer = threading.Timer(deadline_s, watch.end, ("deadline",))
        timer.daemon = True
        with self.lock:
            if self.aborted.is_set():
                raise PostError("aborted")
            self.live.add(watch)
        timer.start()
        try:
            return self._send(url, body, headers, deadline_s, max_bytes, watch)
        except PostError:
            raise
        except (http.client.HTTPException, OSError, ValueError) as err:
            # OSError covers URLError, timeouts and TLS errors; ValueError a header http.client refuses. The error
            # text is dropped: it may quote a header.
            raise PostError(watch.ended or ("deadline" if _is_timeout(err) else "connection")) from None
        finally:
            timer.cancel()
            with self.lock:
                self.live.discard(watch)

    def _send(self, url, body, headers, deadline_s, max_bytes, watch):
        opener = urllib.request.build_opener(*_handlers(watch, direct=is_loopback(urlsplit(url).hostname)))
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            response = opener.open(request, timeout=deadline_s)
        except urllib.error.HTTPError as err:
            err.close()
            if watch.ended:
                raise PostError(watch.ended) from None
            return err.code, err.headers, b""
        with response:
            length = response.headers.get("Content-Length", "")
            if length.isascii() and length.isdigit() and int(length) > max_bytes:
                raise PostError("too_large")
            chunks, size = [], 0
            while chunk := response.read(CHUNK_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise PostError("too_large")
                chunks.append(chunk)
            if watch.ended:  # the watchdog cut the body short
                raise PostError(watch.ended)
            return response.status, response.headers, b"".join(chunks)


def _is_timeout(err: BaseException) -> bool:
    return isinstance(err, TimeoutError) or isinstance(getattr(err, "reason", None), TimeoutError)
