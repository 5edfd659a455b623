"""A fault-injecting HTTP proxy on 127.0.0.1 between boto3 and an S3 server, for the tests of
how the S3 store rides through faults (tests/store/test_s3_faults.py, tests/run/test_faults.py).

Point a store at it the standard way (`AWS_ENDPOINT_URL=proxy.url`, then `Store(...)`); every
request is forwarded byte for byte (the Host header too, so SigV4 signatures still hold) on a
fresh connection to the server, and every answer streamed back, unless a rule says otherwise:

- `slow_down(times, ...)`: answer 503 SlowDown (S3's throttling) without forwarding;
- `lose_answer(times, ...)`: forward, let the server act on it, then answer 500 instead (a
  lost answer: what a proxy or a load balancer in front of S3 does now and then);
- `strip_header(header, ...)`: forward without it, signed again (a server that ignores it;
  the signature is made anew with the environment's credentials, the tests' own);
- `substitute_body(size, ...)`: answer a GET with `size` bytes of its own (a substituted object);
- `cut_body(after, times, ...)`: forward, send the first `after` bytes of the answer's body,
  then close the connection (a read cut midway);
- `hang(...)`: read the request and never answer (a stopped server);
- `refuse()` / `accept()`: close the listening socket (connections refused) / listen again.

A rule matches a method (None: any) and a regular expression searched in the request's path,
for its next `times` requests (None: until `clear()`). `log` has (method, path, what was done)
of every request; `body_bytes_sent` counts the answers' body bytes handed to the kernel.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import threading
from dataclasses import dataclass, field
from email.utils import formatdate
from urllib.parse import urlsplit

_S3_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
    "<Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
)


@dataclass
class Rule:
    """What to do to the next `times` requests (None: all) of `method` whose path matches."""

    action: str
    method: str | None
    path: re.Pattern[str]
    times: int | None
    argument: object = None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and bool(self.path.search(path))


@dataclass
class Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def head(self) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1"] + [f"{k}: {v}" for k, v in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass
class FaultProxy:
    """The proxy (see the module docs): `with FaultProxy("http://127.0.0.1:8333") as proxy:`."""

    upstream: str
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)
    body_bytes_sent: int = 0

    def __post_init__(self) -> None:
        where = urlsplit(self.upstream)
        self._upstream = (where.hostname or "127.0.0.1", where.port or 80)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._released = threading.Event()  # wakes the hung requests
        self._clients: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- rules -------------------------------------------------------------------------

    def _add(self, action: str, method: str | None, path: str, times: int | None, arg=None) -> None:
        with self._lock:
            self.rules.append(Rule(action, method, re.compile(path), times, arg))

    def slow_down(self, times: int | None, method: str | None = "PUT", path: str = "") -> None:
        self._add("slow_down", method, path, times)

    def lose_answer(self, times: int | None, method: str | None = "PUT", path: str = "") -> None:
        self._add("lose", method, path, times)

    def strip_header(self, header: str, method: str | None = "PUT", path: str = "") -> None:
        self._add("strip", method, path, None, header.lower())

    def substitute_body(self, size: int, method: str = "GET", path: str = "") -> None:
        self._add("substitute", method, path, None, size)

    def cut_body(self, after: int, times: int | None = 1, path: str = "") -> None:
        self._add("cut", "GET", path, times, after)

    def hang(self, method: str | None = None, path: str = "") -> None:
        self._released.clear()
        self._add("hang", method, path, None)

    def clear(self) -> None:
        """No rule any more; hung requests are let go (their connections closed)."""
        with self._lock:
            self.rules.clear()
        self._released.set()

    def count(self, method: str, path: str, done: str | None = None) -> int:
        """How many requests of `method` whose path matches `path` (and `done`) came."""
        pattern = re.compile(path)
        return sum(
            1
            for m, p, d in list(self.log)
            if m == method and pattern.search(p) and (done is None or d == done)
        )

    def _rule_for(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path) and rule.times != 0:
                    if rule.times is not None:
                        rule.times -= 1
                    return rule
        return None

    # --- listening ---------------------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        self.accept()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def accept(self) -> None:
        """Listen (again, on the same port) and serve."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accepting, args=(listener,), daemon=True).start()

    def refuse(self) -> None:
        """Stop listening (a connection is refused) and drop every open connection."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)  # shut down first: a close alone does not wake its accept()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            _close(client)

    def close(self) -> None:
        self._closed.set()
        self.clear()
        self.refuse()

    def _accepting(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # refused or closed
            with self._lock:
                self._clients.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        """One client connection: its requests in turn (keep-alive) until it or a rule ends it."""
        try:
            reader = client.makefile("rb")
            while not self._closed.is_set():
                request = _read_request(reader, client)
                if request is None or not self._answer(client, request):
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._clients.discard(client)
            _close(client)

    # --- answering ---------------------------------------------------------------------

    def _answer(self, client: socket.socket, request: Request) -> bool:
        """Answer `request` as the rules say; False when the connection is to be closed."""
        path = request.target.split("?", 1)[0]
        rule = self._rule_for(request.method, path)
        action = rule.action if rule else "forward"
        self.log.append((request.method, request.target, action))
        if action == "slow_down":
            return self._error(client, 503, "Slow Down", "SlowDown", "Please reduce your rate")
        if action == "hang":
            self._released.wait()
            return False
        if action == "substitute":
            assert rule is not None
            return self._substitute(client, int(rule.argument))  # type: ignore[call-overload]
        if action == "strip":
            assert rule is not None
            request.headers = [(k, v) for k, v in request.headers if k.lower() != rule.argument]
            _sign(request)
        try:
            upstream, response = self._forward(request)
        except OSError:
            return self._error(client, 502, "Bad Gateway", "BadGateway", "server unreachable")
        try:
            if action == "lose":
                response.read()  # the server acted on it; the client never hears
                return self._error(client, 500, "Internal Server Error", "InternalError", "lost")
            cut = int(rule.argument) if action == "cut" and rule else None  # type: ignore[call-overload]
            return self._relay(client, request.method, response, cut)
        finally:
            response.close()
            upstream.close()

    def _forward(self, request: Request) -> tuple[socket.socket, http.client.HTTPResponse]:
        upstream = socket.create_connection(self._upstream, timeout=120)
        try:
            upstream.sendall(request.head() + request.body)
            response = http.client.HTTPResponse(upstream, method=request.method)
            response.begin()
        except BaseException:
            upstream.close()
            raise
        return upstream, response

    def _relay(
        self,
        client: socket.socket,
        method: str,
        response: http.client.HTTPResponse,
        cut: int | None,
    ) -> bool:
        """Stream `response` to the client (its first `cut` body bytes only, then close)."""
        head = [f"HTTP/1.1 {response.status} {response.reason}"]
        head += [f"{k}: {v}" for k, v in response.getheaders()]
        client.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        chunked = response.chunked
        sent = 0
        while method != "HEAD":
            data = response.read(1 << 16)
            if not data:
                break
            if cut is not None:
                data = data[: max(0, cut - sent)]
                if not data:
                    return False
            client.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            sent += len(data)
            self.body_bytes_sent += len(data)
        if cut is not None:
            return False
        if chunked:
            client.sendall(b"0\r\n\r\n")
        return (response.getheader("connection") or "").lower() != "close"

    def _error(
        self, client: socket.socket, status: int, reason: str, code: str, message: str
    ) -> bool:
        body = _S3_ERROR.format(code=code, message=message).encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nDate: {formatdate(usegmt=True)}\r\n\r\n"
        )
        client.sendall(head.encode() + body)
        return True

    def _substitute(self, client: socket.socket, size: int) -> bool:
        """A GET answered with `size` zero bytes as the object, until the client hangs up."""
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            f'Content-Length: {size}\r\nETag: "substituted"\r\n'
            f"Last-Modified: {formatdate(usegmt=True)}\r\nDate: {formatdate(usegmt=True)}\r\n\r\n"
        )
        client.sendall(head.encode())
        piece = bytes(1 << 16)
        left = size
        while left > 0:
            data = piece[: min(left, len(piece))]
            client.sendall(data)  # OSError when the client has gone: the connection ends
            self.body_bytes_sent += len(data)
            left -= len(data)
        return True


def _read_request(reader, client: socket.socket) -> Request | None:  # noqa: ANN001
    """The next request on a connection, its body raw (chunked or not), or None at its end;
    an `Expect: 100-continue` is answered here and not forwarded."""
    line = reader.readline(1 << 16)
    if not line.strip():
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: list[tuple[str, str]] = []
    while True:
        raw = reader.readline(1 << 16).decode("latin-1").rstrip("\r\n")
        if not raw:
            break
        name, _, value = raw.partition(":")
        headers.append((name.strip(), value.strip()))
    named = {k.lower(): v for k, v in headers}
    if named.get("expect", "").lower() == "100-continue":
        client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        headers = [(k, v) for k, v in headers if k.lower() != "expect"]
    if "chunked" in named.get("transfer-encoding", "").lower():
        body = _read_chunked(reader)
    else:
        body = reader.read(int(named.get("content-length", "0")))
    return Request(method, target, headers, body)


def _read_chunked(reader) -> bytes:  # noqa: ANN001
    """A chunked body as it came (sizes, data, trailers), to forward unchanged."""
    raw = bytearray()
    while True:
        size_line = reader.readline(1 << 16)
        raw += size_line
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers, then the empty line
                trailer = reader.readline(1 << 16)
                raw += trailer
                if trailer in (b"\r\n", b"\n", b""):
                    return bytes(raw)
        raw += reader.read(size + 2)


def _sign(request: Request) -> None:
    """Sign `request` again (SigV4, the environment's credentials and region), as boto3
    would have signed it had it been sent as it now is."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    unsigned = [("authorization", ""), ("x-amz-date", ""), ("x-amz-content-sha256", "")]
    drop = {k for k, _ in unsigned}
    headers = {k: v for k, v in request.headers if k.lower() not in drop}
    host = next(v for k, v in request.headers if k.lower() == "host")
    aws = AWSRequest(
        method=request.method, url=f"http://{host}{request.target}", headers=headers,
        data=request.body,
    )  # fmt: skip
    credentials = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    S3SigV4Auth(credentials, "s3", region).add_auth(aws)
    request.headers = [
        (k, v.decode() if isinstance(v, bytes) else v) for k, v in aws.headers.items()
    ]


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
