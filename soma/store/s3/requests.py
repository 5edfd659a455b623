"""What an S3 request can raise, which of it may pass when asked again, and the boto3 client
that asks once: the request half of the bucket store (soma.store.s3.backend), kept apart
from what the requests do.

Every request rides through transient faults (a 503 SlowDown storm, a server restarting,
a proxy's 5xx, a connection refused or cut): it is repeated with the store's patience
(soma.store.patience: SOMA_STORE_PATIENCE, 120 s by default), then StoreUnavailable names
it. boto3's own retries are off (one attempt each), so that soma knows when a request was
repeated, and its timeouts are at most the patience (at least `TIMEOUT_FLOOR`), so that a
server that stopped answering is given up on about when the patience says. Retrying is
safe: every request is idempotent or conditional. A conditional PUT (claim, swap) repeated
after a transient failure and then refused (412) may have been written by its own first
attempt, whose answer was lost: the key is read back, and it was this call's when it holds
exactly the body this call sent and the random token it sent with it (user metadata
`x-amz-meta-soma-put`): claim True, swap its ETag; else somebody else's. The token tells
apart two claimers of one digest (several processes claim one name with one digest, e.g.
a run's starting weights, and a process may claim a name twice): by body alone both could
be told they won. A first attempt's 412 is a plain loss, as always. A blob's create needs
no read-back: any bytes under its digest are as good.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

from soma.store.patience import Patience

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionError,
        HTTPClientError,
        IncompleteReadError,
        SSLError,
    )
except ImportError as _absent:  # an optional extra: the scheme says what to install
    raise ImportError("boto3 is needed for s3:// stores", name="boto3") from _absent

# boto3's connect and read timeouts: the patience, within [TIMEOUT_FLOOR, TIMEOUT_CAP] s (the
# cap is botocore's default; the floor leaves a slow but live server time to answer)
TIMEOUT_FLOOR = 5.0
TIMEOUT_CAP = 60.0

# what a request can raise: the server's answer, or no answer (no endpoint, no credentials)
ERRORS = (ClientError, BotoCoreError)
# the server's answers that may pass when asked again: throttled, overloaded, restarting
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "InternalError",
        "ServiceUnavailable",
    }
)


def code_of(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def status_of(error: Exception) -> int:
    return int(getattr(error, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def transient(error: BaseException) -> bool:
    """Whether asking again may succeed: a 5xx (not 501, 505: what the server cannot do), 429
    or a throttling code; or no answer at all (connection refused, cut, timed out: the
    botocore HTTP errors, SSL's certificate refusals excepted). Never a credentials or
    parameter error: nothing changes those but the caller."""
    if isinstance(error, ClientError):
        return status_of(error) in _TRANSIENT_STATUS or code_of(error) in _TRANSIENT_CODES
    connection = isinstance(error, (ConnectionError, HTTPClientError, IncompleteReadError))
    return connection and not isinstance(error, SSLError)


def lost(error: Exception) -> bool:
    """412: the key exists (If-None-Match: * refused the write)."""
    return status_of(error) == 412 or code_of(error) == "PreconditionFailed"


def busy(error: Exception) -> bool:
    """409: another conditional write of the key is in progress; retry (AWS's advice)."""
    return status_of(error) == 409 or code_of(error) == "ConditionalRequestConflict"


def missing(error: Exception) -> bool:
    """404: the key (or upload) is not there; never the bucket (NoSuchBucket: a store whose
    bucket is gone is no empty store)."""
    if code_of(error) == "NoSuchBucket":
        return False
    return status_of(error) == 404 or code_of(error) in ("NoSuchKey", "404", "NotFound")


def server_date(response: dict) -> float:
    """The server's time when it answered (its Date header), in seconds since the epoch."""
    return parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"]).timestamp()


def client_for(patience: Patience) -> Any:
    """A boto3 S3 client that tries each request once (soma repeats it: see the docs), and
    waits for a connection or an answer about as long as the patience."""
    wait = min(TIMEOUT_CAP, max(TIMEOUT_FLOOR, patience.seconds))
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},  # 1: the first attempt only
        connect_timeout=wait,
        read_timeout=wait,
    )
    return boto3.client("s3", config=config)
