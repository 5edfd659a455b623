"""How long the store rides through its own faults (soma.store.patience), and what the
folder store retries (soma.store.folder.retries.transient)."""

from __future__ import annotations

import errno

import pytest

from soma.store.errors import BadStore, StoreUnavailable
from soma.store.folder import retries as folder
from soma.store.patience import Patience


def test_a_transient_error_is_retried_until_it_passes() -> None:
    failures, slept = [OSError(errno.EIO, "I/O error")] * 3, []

    def call() -> str:
        if failures:
            raise failures.pop()
        return "done"

    assert (
        Patience(seconds=60).retrying(
            call, transient=folder.transient, what=lambda: "put", sleep=slept.append
        )
        == "done"
    )
    assert slept == [0.1, 0.2, 0.4]  # doubling from `first`


def test_out_of_patience_names_the_request_and_the_last_error() -> None:
    def call() -> None:
        raise OSError(errno.ESTALE, "Stale file handle")

    with pytest.raises(StoreUnavailable, match=r"claim of 'x' in Store\('/s'\) failed .*Stale"):
        Patience(seconds=0.05, first=0.01, cap=0.01).retrying(
            call, transient=folder.transient, what=lambda: "claim of 'x' in Store('/s')"
        )


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.ENOENT])
def test_a_full_disk_or_a_refusal_is_not_retried(code: int) -> None:
    calls = []

    def call() -> None:
        calls.append(1)
        raise OSError(code, "no")

    with pytest.raises(OSError) as raised:
        Patience(seconds=60).retrying(call, transient=folder.transient, what=lambda: "put")
    assert raised.value.errno == code and len(calls) == 1


def test_the_patience_is_read_from_the_environment_and_refused_naming_it(monkeypatch) -> None:
    monkeypatch.setenv("SOMA_STORE_PATIENCE", "7.5")
    assert Patience.from_environment().seconds == 7.5
    monkeypatch.setenv("SOMA_STORE_PATIENCE", "soon")
    with pytest.raises(BadStore, match="SOMA_STORE_PATIENCE='soon' must be a number"):
        Patience.from_environment()
