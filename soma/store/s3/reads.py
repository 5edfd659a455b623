"""A blob's read from a bucket: its size before its bytes, and its bytes straight into the
caller's buffer, a large one by several ranged GETs side by side (soma.store.s3.backend's reads).

Why a module of its own: a 100 MB read is the bucket's hot path (issue 34: a get of a model
was 0.16x a plain `get_object`, four passes over its bytes), and what makes it fast is
machinery that has nothing to do with names or claims:

- The first GET asks for the first `PARALLEL_FROM` bytes (a `Range`): a blob that small, a
  client's export, is one request as before, and the answer says how large the blob is
  (`Content-Range`), so the store makes its one final buffer before any byte arrives.
- The rest of a larger blob is `RANGE`-byte ranged GETs, `AT_ONCE` in flight (threads: the
  socket reads release the GIL), each read into its own slice of that buffer; `fill` yields
  how far from the start the buffer is complete, so the store hashes in order while the
  later ranges are still arriving. Every range asks `If-Match` the first answer's ETag:
  the ranges are of one object, or the read is refused.
- A body is read with `readinto` on the HTTP response under botocore's stream (one copy,
  the kernel's), not `read()` (two more: http.client's and the caller's); where that
  response is not there (another botocore), `read()` and a copy.
- A range cut midway resumes where it stopped (a ranged GET, If-Match), each step within
  the store's patience, as a single read did; a range that fails for good fails the read,
  and the others are stopped and waited for: nothing writes into the buffer once `fill`
  has returned or raised.

Nothing here is verified: the store hashes what `fill` hands out (soma.store.backend), and a
blob whose bytes do not hash to its digest is refused there, whichever range was damaged.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from soma.store.errors import StoreError
from soma.store.s3.requests import ERRORS

try:
    from botocore.exceptions import ResponseStreamingError
except ImportError as _absent:  # an optional extra: the scheme says what to install
    raise ImportError("boto3 is needed for s3:// stores", name="boto3") from _absent

# A blob larger than this is read by ranges side by side; one this small is one GET.
PARALLEL_FROM = 16 << 20
RANGE = 8 << 20  # each range after the first answer's
AT_ONCE = 4  # ranges in flight (boto3's pool holds 10 connections)
STEP = 1 << 20  # bytes read per call (and per retry of a cut read)


def total_of(got: dict) -> tuple[int, int]:
    """(the object's size, the bytes this answer's body holds): a ranged answer's
    Content-Range `bytes a-b/size`, or a whole answer's Content-Length."""
    covers = int(got["ContentLength"])
    whole = str(got.get("ContentRange") or "").rpartition("/")[2]
    return (int(whole) if whole.isdigit() else covers), covers


def read_into(body: Any, view: memoryview) -> int:
    """Fill `view` from a botocore body as far as one read goes; how many bytes (0: ended).
    Straight from the socket into `view` where the response is http.client's (its errors
    as botocore's, transient: see soma.store.s3.requests)."""
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    if not isinstance(fp, http.client.HTTPResponse):
        data = body.read(len(view))
        view[: len(data)] = data
        return len(data)
    try:
        n = fp.readinto(view) or 0
        if not n and len(view):  # http.client says nothing of a body cut short: urllib3 would
            raise http.client.IncompleteRead(b"", len(view))
    except (OSError, http.client.HTTPException) as error:
        raise ResponseStreamingError(error=error) from error
    if fp.isclosed():  # all of it read: the connection goes back to boto3's pool
        raw.release_conn()
    return n


class Reading:
    """Blob `key`'s bytes, `size` of them at most (its Content-Length, or the caller's
    limit + 1), being read: as chunks (`Iterator[bytes]`, the Backend protocol's) or into
    the caller's buffer (`fill`), from where the last read stopped."""

    def __init__(self, backend: Any, key: str, got: dict, limit: int | None) -> None:
        self.backend, self.key = backend, key
        total, covers = total_of(got)
        self.size = total if limit is None else min(total, limit + 1)
        self.etag = str(got["ETag"])
        self.taken = 0  # bytes handed out so far
        self._first = got["Body"]  # what the first answer's body still holds, from `taken`
        self._covers = min(covers, self.size)
        self._lock = threading.Lock()  # `close` from another thread than a range's

    # --- the Backend protocol's chunks ----------------------------------------------------

    def __iter__(self) -> Reading:
        return self

    def __next__(self) -> bytes:
        if self.taken >= self.size:
            self.close()
            raise StopIteration
        if self.taken == self._covers:  # past the first answer: one ranged GET for the rest
            rest = partial(self._ranged, self.taken, self.size)
            try:
                body = self.backend._request("GET", self.key, rest)
            except ERRORS as error:
                raise self.backend._failed("GET", self.key, error) from None
            with self._lock:
                self._first, self._covers = body, self.size
        chunk = bytearray(min(STEP, self.size - self.taken))
        for _ in self.fill(memoryview(chunk)):
            pass
        return bytes(chunk)

    # --- into a buffer --------------------------------------------------------------------

    def fill(self, view: memoryview) -> Iterator[int]:
        """Fill `view` with the next `len(view)` bytes (fewer: the blob has no more), yielding
        how many from its start are there so far (increasing; the last is the count). Ranges
        side by side past the first answer when more than `RANGE` of them are wanted; a
        refusal or a failure for good stops them all before it is raised."""
        start = self.taken
        end = min(self.size, start + len(view))
        pieces: list[tuple[int, int]] = []
        if start < self._covers:
            pieces.append((start, min(end, self._covers)))
        for a in range(max(start, self._covers), end, RANGE):
            pieces.append((a, min(end, a + RANGE)))
        try:
            if len(pieces) == 1:
                for done in self._piece(view, start, *pieces[0], lambda: False):
                    yield done - start
            elif pieces:
                yield from self._side_by_side(view, start, pieces)
        except BaseException:
            self.close()  # a read that failed (or was given up) is not gone on with
            raise
        self.taken = end

    def _side_by_side(
        self, view: memoryview, start: int, pieces: list[tuple[int, int]]
    ) -> Iterator[int]:
        """`pieces` read by `AT_ONCE` threads; how far from `start` all are there, as it grows
        (the first failure raised as soon as it happens)."""
        filled = [a for a, _ in pieces]  # how far each piece got
        finished = [False] * len(pieces)
        failures: list[BaseException] = []
        changed = threading.Condition()
        stop = threading.Event()

        def run(i: int) -> None:
            try:
                for done in self._piece(view, start, *pieces[i], stop.is_set):
                    with changed:
                        filled[i] = done
                        changed.notify()
            except BaseException as error:  # noqa: BLE001 - raised by the reader below
                with changed:
                    failures.append(error)
            finally:
                with changed:
                    finished[i] = True
                    changed.notify()

        pool = ThreadPoolExecutor(min(AT_ONCE, len(pieces)), thread_name_prefix="soma-get")
        try:
            for i in range(len(pieces)):
                pool.submit(run, i)
            for i, (a, b) in enumerate(pieces):
                shown = a  # what was yielded of this piece (it may be whole already)
                while shown < b:
                    with changed:
                        while filled[i] == shown and not finished[i] and not failures:
                            changed.wait()
                        if failures:
                            raise failures[0]
                        if filled[i] == shown:  # finished short, not failed: stopped
                            raise StoreError(f"GET s3://{self.backend.bucket}/{self.key} stopped")
                        shown = filled[i]
                    yield shown - start
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)  # none writes into `view` after this

    def _piece(
        self, view: memoryview, start: int, a: int, b: int, stopped: Callable[[], bool]
    ) -> Iterator[int]:
        """Bytes `a` to `b` of the blob into `view` (which starts at byte `start`), a `STEP`
        at a time, each within the store's patience: from the first answer's body where it
        holds them (it goes on from byte `a`), else a ranged GET (If-Match), again after a
        cut where it stopped. Yields how far it got."""
        first = a < self._covers
        body = None
        done = a

        def step() -> int:
            nonlocal body
            if body is None and first:
                with self._lock:
                    body, self._first = self._first, None
            if body is None:  # the first answer's stands for all it covered: so does its rest
                body = self._ranged(done, self._covers if first else b)
            try:
                return read_into(body, view[done - start : min(b, done + STEP) - start])
            except BaseException:
                body.close()
                body = None
                raise

        try:
            while done < b and not stopped():
                try:
                    n = self.backend._request("GET", self.key, step)
                except ERRORS as error:
                    raise self.backend._failed("GET", self.key, error) from None
                if not n:
                    raise StoreError(
                        f"GET s3://{self.backend.bucket}/{self.key}: its body ended after "
                        f"{done} of the {self.size} bytes of its Content-Length"
                    )
                done += n
                yield done
        finally:
            if body is not None:
                if first and done == b < self._covers:  # the next fill goes on from here
                    with self._lock:
                        self._first = body
                else:  # read to its end (a no-op), or given up: the connection is dropped
                    body.close()

    def _ranged(self, done: int, b: int) -> Any:
        """The body of bytes `done` to `b` of the blob, if it is still the object being read
        (If-Match its ETag: a 412 is a refusal) and it offers that many bytes."""
        got = self.backend.client.get_object(
            Bucket=self.backend.bucket,
            Key=self.key,
            Range=f"bytes={done}-{b - 1}",
            IfMatch=self.etag,
        )
        if int(got["ContentLength"]) != b - done:
            got["Body"].close()
            raise StoreError(
                f"GET s3://{self.backend.bucket}/{self.key}: asked for bytes {done}-{b - 1}, the "
                f"server offers {got['ContentLength']} where {b - done} were to come"
            )
        return got["Body"]

    def close(self) -> None:
        """No more is wanted: the first answer's connection is dropped if it was not read."""
        with self._lock:
            body, self._first = self._first, None
        if body is not None:
            body.close()
