"""One secure sum's session (who, how many, which fixed point) and a client's secrets for it.

The bottom of the protocol's modules (soma.secagg.protocol): everything else takes a
`Session`, and the phases a client's `Secrets`, which never leave its process.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soma.round import layout
from soma.round import signing as signatures
from soma.round.once import read_record
from soma.secagg import crypto, shamir
from soma.secagg.errors import SecAggError
from soma.secagg.quantize import DEFAULT_PRECISION_BITS, DEFAULT_RING_BITS, FixedPoint
from soma.store import Store
from soma.store.names import check_name

DEADLINE = 600.0  # seconds a barrier waits by default
VERSION = 1


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def plural(items: list[int], one: str = "client", many: str = "clients") -> str:
    return f"{one if len(items) == 1 else many} {', '.join(map(str, items))}" if items else "none"


# --- the session --------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """One secure sum: where in the store (`prefix`), who may take part (`members`), how many
    must stay to the end (`threshold`), and the fixed point (see soma.secagg.quantize).

    Every client of a session passes the same one; the first to advertise writes it down
    (`<prefix>/about`) and a client that says otherwise is refused.
    """

    prefix: str
    members: tuple[int, ...]
    threshold: int
    precision_bits: int = DEFAULT_PRECISION_BITS
    ring_bits: int = DEFAULT_RING_BITS
    # the run's roster: every message signed and checked (soma.round.signing); None: unsigned
    signing: signatures.Signing | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_name(self.prefix)
        members = tuple(self.members)
        for k in members:
            if not is_int(k) or k < 0:
                raise SecAggError(f"member {k!r} must be a client number >= 0")
        if list(members) != sorted(set(members)):
            raise SecAggError(f"members {members!r} must be sorted and distinct")
        if len(members) < 2:
            raise SecAggError(
                f"secure aggregation needs at least 2 members, not {len(members)}: "
                "the sum of one client's export is its export"
            )
        object.__setattr__(self, "members", members)
        if not is_int(self.threshold) or not 2 <= self.threshold <= len(members):
            raise SecAggError(
                f"threshold {self.threshold!r} must be an integer in 2..{len(members)} "
                f"(the members), and more than half of them: {len(members) // 2 + 1} or more"
            )
        if 2 * self.threshold <= len(members):
            raise SecAggError(
                f"threshold {self.threshold} is at or below half the {len(members)} members: "
                f"two groups of {self.threshold} that do not overlap could rebuild both "
                f"halves of one client's secrets (its self-mask seed and its mask key), which "
                f"unmasks it; it must be at least "
                f"{len(members) // 2 + 1}"
            )
        FixedPoint(self.precision_bits, self.ring_bits)  # checks them

    @property
    def fixed(self) -> FixedPoint:
        return FixedPoint(self.precision_bits, self.ring_bits)

    @property
    def what(self) -> str:
        return f"secure sum {self.prefix!r}"

    def name(self, *parts: object) -> str:
        return layout.session(self.prefix, *parts)

    def about(self) -> dict[str, Any]:
        return {
            "secagg": VERSION,
            "members": list(self.members),
            "threshold": self.threshold,
            "precision_bits": self.precision_bits,
            "ring_bits": self.ring_bits,
        }

    def check_member(self, client: object) -> int:
        if not is_int(client) or client not in self.members:
            raise SecAggError(
                f"{self.what}: client {client!r} is not one of its members {list(self.members)}"
            )
        return client  # type: ignore[return-value]

    @classmethod
    def read(cls, store: Store, prefix: str) -> Session:
        """The session as its first client wrote it down (`<prefix>/about`)."""
        digest = store.resolve(layout.session(prefix, "about"))
        if digest is None:
            raise SecAggError(f"no secure sum at {prefix!r} in {store}: nobody advertised keys")
        about = read_record(store, digest)
        try:
            if about["secagg"] != VERSION:
                raise KeyError("secagg")
            members, threshold = tuple(about["members"]), about["threshold"]
            precision_bits, ring_bits = about["precision_bits"], about["ring_bits"]
        except (KeyError, TypeError):
            raise SecAggError(
                f"{layout.session(prefix, 'about')} is not a secure sum of version {VERSION}"
            ) from None
        return cls(prefix, members, threshold, precision_bits, ring_bits)


def settle_about(store: Store, session: Session, mine: int) -> None:
    """Write the session down, or check it is the one already written."""
    name = session.name("about")
    if store.resolve(name) is None:
        store.claim(name, store.put_value(session.about()))
    theirs = read_record(store, store.resolve(name) or "")
    ours = session.about()
    differ = [
        f"{k} {theirs.get(k)!r} there, {v!r} here" for k, v in ours.items() if theirs.get(k) != v
    ]
    if differ:
        raise SecAggError(
            f"{session.what}: client {mine} was given another session than the one written "
            f"down at {name!r}: {'; '.join(differ)}"
        )


# --- a client's secrets ------------------------------------------------------------------


class Secrets:
    """One client's private state for one session, in this process's memory and nowhere else.

    Its two X25519 private keys, its self-mask seed, its own shares of them (the shares for
    itself are never written), and the AES keys it agreed with the others for their shares.
    It refuses to be pickled, so that it is never written out by accident; its repr shows none
    of it.
    """

    __slots__ = ("session", "mine", "_c", "_s", "_b", "_own", "_keys", "_share_keys")

    def __init__(self, session: Session, mine: int) -> None:
        self.session = session
        self.mine = session.check_member(mine)
        self._c = crypto.new_private_key()
        self._s = crypto.new_private_key()
        self._b = _random_seed()
        self._own: tuple[int, int] | None = None
        self._keys: dict[int, dict] | None = None  # the advertised public keys, once read
        self._share_keys: dict[int, bytes] = {}  # the AES key shared with each other client

    def __repr__(self) -> str:
        return f"Secrets(client {self.mine} of {self.session.prefix!r})"

    def __reduce__(self) -> Any:
        raise TypeError("a client's secure-aggregation secrets are never pickled")

    def private_record(self) -> dict[str, Any]:
        """Everything private, as text, for a client whose phases run in separate processes
        (the workflow's jobs): written by `soma.config.secrets.keep` to the client's own folder
        (0700), never to the store. What is derived from it (the keys read, the AES keys) is
        derived again."""
        return {
            "session": self.session.prefix,
            "client": self.mine,
            "c": crypto.private_bytes(self._c).hex(),
            "s": crypto.private_bytes(self._s).hex(),
            "b": self._b.hex(),
            "own": None if self._own is None else [format(x, "x") for x in self._own],
        }

    @classmethod
    def from_private_record(cls, session: Session, record: Mapping[str, Any]) -> Secrets:
        """The secrets `private_record` wrote, for the same session and client."""
        if record.get("session") != session.prefix:
            raise SecAggError(
                f"secrets of session {record.get('session')!r}, not of {session.prefix!r}"
            )
        secrets = cls.__new__(cls)
        secrets.session, secrets.mine = session, session.check_member(record["client"])
        secrets._c = crypto.private_from_bytes(bytes.fromhex(record["c"]))
        secrets._s = crypto.private_from_bytes(bytes.fromhex(record["s"]))
        secrets._b = bytes.fromhex(record["b"])
        own = record.get("own")
        secrets._own = None if own is None else (int(own[0], 16), int(own[1], 16))
        secrets._keys, secrets._share_keys = None, {}
        return secrets

    def public(self) -> dict[str, Any]:
        """What `advertise` publishes: the public keys and the self-mask commitment."""
        return {
            "client": self.mine,
            "c": crypto.public_bytes(self._c).hex(),
            "s": crypto.public_bytes(self._s).hex(),
            "b_commitment": commitment(self.session, self.mine, self._b),
        }


def _random_seed() -> bytes:
    return os.urandom(shamir.SECRET_BYTES)


def commitment(session: Session, client: int, seed: bytes) -> str:
    """sha256 of the labelled self-mask seed: binding, and hiding (the seed is 256 random bits)."""
    return hashlib.sha256(crypto.label("self-mask", session.prefix, client) + seed).hexdigest()
