"""Secure aggregation on a shared folder, with nobody in charge: every phase a barrier in the store.

After Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning"
(CCS 2017), in its honest-but-curious form, over soma's store instead of a server. Each client
of a session contributes size * export (its export weighted by its size) and its size; the
store ends up holding their sum, and whoever claims the unmasking learns that sum and the total
size, and nothing else about any one client's export or size. So does anyone else who can read
the shared folder: everything the unmasker reads is in the store, and nothing in the store
gives a client's export away.

    weighted, total = secure_sum(store, "run/round/3/secagg", export, size,
                                 mine=k, members=range(10), threshold=6)
    mean = average(weighted, total, like=export)

Phases (a client's; each starts with a barrier on the phase before):

1. `advertise`: two fresh X25519 key pairs, c (to encrypt shares to it) and s (for its pairwise
   masks), and a fresh 32-byte self-mask seed b; publishes the public keys and a commitment
   sha256(label, b) under `keys/<k>`.
2. `share`: once the keys are there, splits b and the private key s (Shamir, threshold t, one
   share for each client with keys, at x = client + 1) and writes each recipient's pair of
   shares (two 66-byte field elements) encrypted to it: AES-GCM under
   HKDF(X25519(c_mine, c_theirs)), bound to session, sender and recipient. One record per
   sender (`shares/<k>`), so a client's shares are all there or none, and n names rather than
   n^2 (each client then reads n records of n ciphertexts: ~33 KB each at n = 100).
3. `masked_input`: once the shares are there, writes y = q(size * export) + PRG(b) +
   sum_v sign(k, v) PRG(s_kv), mod 2^k (k = ring_bits, 64 by default), with the size as one
   more element of the vector;
   s_kv = HKDF(X25519(s_mine, s_v)) is the pair's seed, sign +1 for k < v and -1 for k > v,
   over every other client that shared. q is `quantize.FixedPoint` (the overflow bound is
   checked before anything of the export is written).
4. `reveal`: once the masked inputs are there, each client that contributed publishes its
   shares: of b_u for every u that contributed, of s_d for every d that shared and then dropped
   out (never for both of one client: only b is ever revealed of a contributor, only s of a
   dropped client).
5. `unmask`: whoever claims it (soma.round.once: claimed once, taken over only from a holder proven
   gone) rebuilds each b_u and each dropped s_d from t of the revealed shares (checked against
   b's commitment and s's public key), sums the y's, subtracts every PRG(b_u), and for each
   dropped d and contributor u subtracts what u added for the pair (u, d). What is left is the
   sum of q(size * export) and of the sizes, read back as float64 tensors within
   n * 2^-(precision_bits + 1) of the true sums (`FixedPoint.error`); it is published
   (claimed) under `sum`. `average(weighted, total, like=export)` is then FedAvg's mean.

`advertise` and `share` need no export: a client may run them before it trains, so that only
`masked_input`, `reveal` and `unmask` wait on the round's slowest trainer (mind the masked
barrier's deadline, which then covers the training too).

Agreeing on who is in. A barrier waits until every expected client is there; past its deadline
it goes on with those that are, if they are at least the threshold (else `BelowThreshold`
names who is missing). Two clients must never go on with different sets: a client revealing
b_d while another reveals s_d would hand out both halves of d's input. So each phase's set is
a *roster*, claimed once in the store by the first client to pass the barrier (`roster/keys`,
`roster/shares`, `roster/masked`, each naming the digests of the records it took), and every
client goes on with the roster, not with what it sees. A client that comes after its phase's
roster was claimed is left out (`LeftOut`); a masked input written after the masked roster is
never unmasked: its self-mask seed is never revealed, even though its pairwise masks are.

Layout, under the session's prefix (names are claimed: written once, never replaced):

    <prefix>/about             the session: members, threshold, fixed point (claimed by the first)
    <prefix>/keys/<k>          k's public keys c and s, and its self-mask commitment
    <prefix>/shares/<k>        k's shares: AES-GCM ciphertexts for the keys roster's clients
    <prefix>/masking/<k>       k's one masking, claimed before anything masked is written
    <prefix>/masked/<k>        k's masked input: its layout, and its ring elements (uint64 tensors)
    <prefix>/reveal/<k>        k's revealed shares: b of each contributor, s of each dropped client
    <prefix>/roster/<phase>    who is in, for keys, shares and masked (claimed once)
    <prefix>/withdrawn/<k>     k will not go on, and why: no barrier waits for it
    <prefix>/confirmed/<k>     with a roster: the survivors (masked roster) k saw, signed
    <prefix>/unmasked/...      soma.round.once's claim, takeovers, audit and published result
    <prefix>/sum               the result (claimed): weighted sum, total, who contributed, dropped

What is public (in the store, to everyone who reads it): the members, the threshold, the fixed
point; who advertised, shared, contributed, revealed and dropped out; public keys; masked inputs
(uniform in the ring to anyone without the seeds); the revealed shares; and the result. What is
not: any client's export, size, private key or self-mask seed. Sizes are secret: the total is
summed securely like the rest.

Threat model and limits. The clients follow the protocol (they may crash at any point); the
unmasker and any reader of the folder are curious; fewer than t clients collude with them. As
in the paper's honest-but-curious version, nothing is signed unless the run has a roster:
then every message is signed by its client and checked before use (soma.round.signing), and
before revealing, each client signs the survivors it saw (`confirmed/<k>`) and refuses to
reveal when the signed sets differ (`consistent`: the malicious-server variant's check).
t > n/2 (a majority of the members) and t >= 2 are enforced: at or below half, two groups of t
that do not overlap could rebuild both halves of one client's secrets (Bonawitz et al. need
t > n/2).
Every pair of clients does a key agreement and every client expands n masks of the model's
size (O(n^2) work in all, as in the paper; SecAgg+ would mask along a sparse graph instead).

Private keys and seeds never leave the client process: they live in a `Secrets` object, in
memory, which refuses to be pickled. All of a client's phases run in that one process (a
process that dies loses them, and the client drops out: recoverable after `share`). A session's
prefix is used once: a rerun draws new keys, and finds the names taken (`SecAggError`); give
each attempt a prefix of its own. A client masks once: `masked_input` claims `masking/<k>`
before it adds a mask, so a second attempt with the same secrets (the workflow keeps them in
a file between jobs) is refused (`MaskedOnce`) before anything masked is written.

Deadlines are per barrier, in seconds from when the client starts waiting on it (None: wait
forever). Integer and bool tensors are refused (a count's mean is not a count, and keeping the
first client's, as soma.fedavg does, would reveal it): leave them out of the export.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from soma.nodes import Export
from soma.round import holders, layout, once
from soma.round import signing as signatures
from soma.round.once import POLL, Backoff, Place, read_record
from soma.secagg import crypto, masks, shamir
from soma.secagg.errors import (
    BadInput,
    BelowThreshold,
    InconsistentShares,
    LeftOut,
    MaskedOnce,
    SecAggError,
)
from soma.secagg.quantize import DEFAULT_PRECISION_BITS, DEFAULT_RING_BITS, FixedPoint
from soma.store import Store, codecs
from soma.store.errors import StoreError
from soma.store.names import check_name

__all__ = [
    "DEADLINE",
    "Secrets",
    "Session",
    "advertise",
    "average",
    "check_input",
    "masked_input",
    "published",
    "received_shares",
    "result",
    "reveal",
    "secure_sum",
    "share",
    "unmask",
]

DEADLINE = 600.0  # seconds a barrier waits by default
VERSION = 1
# each phase's roster expects the one before's; the keys roster expects the members
_BEFORE = {"shares": "keys", "masked": "shares"}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _plural(items: list[int], one: str = "client", many: str = "clients") -> str:
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
            if not _is_int(k) or k < 0:
                raise SecAggError(f"member {k!r} must be a client number >= 0")
        if list(members) != sorted(set(members)):
            raise SecAggError(f"members {members!r} must be sorted and distinct")
        if len(members) < 2:
            raise SecAggError(
                f"secure aggregation needs at least 2 members, not {len(members)}: "
                "the sum of one client's export is its export"
            )
        object.__setattr__(self, "members", members)
        if not _is_int(self.threshold) or not 2 <= self.threshold <= len(members):
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
        if not _is_int(client) or client not in self.members:
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


def _settle_about(store: Store, session: Session, mine: int) -> None:
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
        (the workflow's jobs): written by `soma.run.secrets.keep` to the client's own folder
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
            "b_commitment": _commitment(self.session, self.mine, self._b),
        }


def _random_seed() -> bytes:
    return os.urandom(shamir.SECRET_BYTES)


def _commitment(session: Session, client: int, seed: bytes) -> str:
    """sha256 of the labelled self-mask seed: binding, and hiding (the seed is 256 random bits)."""
    return hashlib.sha256(crypto.label("self-mask", session.prefix, client) + seed).hexdigest()


# --- the store: written once, read by digest ------------------------------------------------


def _write_once(store: Store, name: str, value: object, what: str) -> str:
    digest = store.put_value(value)
    if store.claim(name, digest) or store.resolve(name) == digest:
        return digest
    raise SecAggError(
        f"{what}: {name!r} is already written, with something else (a second process as the "
        "same client, or the session run again: a session's prefix is used once)"
    )


def _record(store: Store, digest: str, what: str) -> dict[str, Any]:
    try:
        return read_record(store, digest)
    except (StoreError, once.RoundError) as error:
        raise SecAggError(f"cannot read {what}: {error}") from None


def _tree(store: Store, digest: str, what: str) -> dict[str, Any]:
    """A record's JSON alone, its tensors left unread (what a check needs of a masked input)."""
    try:
        tree, _ = codecs.parse_record(store.get(digest), digest)
    except StoreError as error:
        raise SecAggError(f"cannot read {what}: {error}") from None
    if not isinstance(tree, dict):
        raise SecAggError(f"{what} is not a record")
    return tree


def _clients_in(store: Store, folder: str, expected: Iterable[int]) -> dict[int, str]:
    """{client: digest} of the expected clients with a name under `folder`."""
    wanted = set(expected)
    found: dict[int, str] = {}
    for name in store.bound(folder):
        tail = name[len(folder) :]
        if tail.isdigit() and int(tail) in wanted:
            digest = store.resolve(name)
            if digest is not None:
                found[int(tail)] = digest
    return found


def _read_roster(store: Store, session: Session, phase: str, digest: str) -> dict[int, str]:
    _check_signed(store, session, digest, session.name("roster", phase), None)
    record = _record(store, digest, f"the {phase} roster of {session.what}")
    try:
        roster = {int(k): str(d) for k, d in record["present"]}
    except (KeyError, TypeError, ValueError):
        raise SecAggError(f"{session.what}: its {phase} roster is not a roster") from None
    return dict(sorted(roster.items()))


def _roster_now(store: Store, session: Session, phase: str) -> dict[int, str] | None:
    """The phase's roster if it was claimed, else None."""
    digest = store.resolve(session.name("roster", phase))
    return None if digest is None else _read_roster(store, session, phase, digest)


def _roster_before(store: Store, session: Session, phase: str, mine: int | None) -> dict[int, str]:
    """The roster a phase needs to have been agreed already."""
    roster = _roster_now(store, session, phase)
    if roster is None:
        who = "" if mine is None else f"client {mine}: "
        raise SecAggError(f"{who}{session.what} has no {phase} roster yet: a phase was skipped")
    return roster


def _expected(store: Store, session: Session, phase: str) -> list[int]:
    if phase == "keys":
        return list(session.members)
    return sorted(_roster_before(store, session, _BEFORE[phase], None))


def _below(
    session: Session, phase: str, expected: list[int], here: Mapping[int, str], deadline: float
) -> BelowThreshold:
    missing = [k for k in expected if k not in here]
    have, need = len(here), session.threshold
    count = f"{have} of {len(expected)} clients"
    if phase == "keys":
        said = (
            f"{count} advertised keys, {need} needed (the threshold): {_plural(missing)} never came"
        )
    elif phase == "shares":
        said = (
            f"{count} shared their secrets, {need} needed (the threshold): {_plural(missing)} "
            "advertised keys and then dropped out before sharing"
        )
    else:
        said = (
            f"{count} sent a masked input, {need} needed (the threshold): {_plural(missing)} "
            "dropped out after sharing"
        )
    return BelowThreshold(
        f"{session.what}: after {deadline:g}s, {said}",
        missing=missing,
        dropped=missing if phase == "masked" else [],
        have=have,
        need=need,
    )


def _roster(
    store: Store,
    session: Session,
    phase: str,
    *,
    deadline: float | None,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, str]:
    """The barrier at the end of `phase`: wait for everyone expected, or past the deadline for
    at least the threshold; the first one through claims the roster, and all use that one."""
    digest = _roster_digest(store, session, phase, deadline=deadline, backoff=backoff, sleep=sleep)
    return _read_roster(store, session, phase, digest)


def _roster_digest(
    store: Store,
    session: Session,
    phase: str,
    *,
    deadline: float | None,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """`_roster`, the digest of the roster's record."""
    name = session.name("roster", phase)
    expected = _expected(store, session, phase)
    started = time.monotonic()
    delays = backoff.delays()
    while True:
        digest = store.resolve(name)
        if digest is not None:
            return digest
        here = _clients_in(store, session.name(phase) + "/", expected)
        out = set(_clients_in(store, session.name("withdrawn") + "/", expected)) - set(here)
        past = deadline is not None and time.monotonic() - started > deadline
        accounted = len(here) + len(out) == len(expected)  # nobody else is coming
        if accounted and len(here) < session.threshold:
            raise _below(session, phase, expected, here, time.monotonic() - started)
        if accounted or (past and len(here) >= session.threshold):
            _check_present(store, session, phase, here, out)
            record = {
                "phase": phase,
                "expected": expected,
                "present": [[k, d] for k, d in sorted(here.items())],
            }
            store.claim(name, _put_signed(store, session, record, name, _anyone(session)))
            continue  # whichever roster won the claim is everybody's
        if past:
            assert deadline is not None
            raise _below(session, phase, expected, here, deadline)
        sleep(next(delays))


def _must_be_in(roster: Mapping[int, str], secrets: Secrets, phase: str) -> None:
    if secrets.mine not in roster:
        raise LeftOut(
            f"{secrets.session.what}: client {secrets.mine} came after the {phase} roster was "
            f"agreed without it ({_plural(sorted(roster))}); the sum goes on without its export",
            secrets.mine,
            phase,
        )


def _public_keys(store: Store, session: Session, roster: Mapping[int, str]) -> dict[int, dict]:
    """Every advertised client's public keys, by the digests the keys roster names."""
    keys: dict[int, dict] = {}
    for k, digest in roster.items():
        _check_signed(store, session, digest, session.name("keys", k), k)
        record = _record(store, digest, f"client {k}'s keys")
        try:
            c, s = bytes.fromhex(record["c"]), bytes.fromhex(record["s"])
            commitment = str(record["b_commitment"])
        except (KeyError, TypeError, ValueError):
            raise SecAggError(f"{session.what}: client {k}'s keys are not keys") from None
        if record.get("client") != k or len(c) != 32 or len(s) != 32:
            raise SecAggError(f"{session.what}: the keys roster's record for client {k} is not its")
        keys[k] = {"c": c, "s": s, "b_commitment": commitment}
    return keys


def _keys_of(store: Store, secrets: Secrets) -> dict[int, dict]:
    """The public keys of the keys roster, read once per client (the roster never changes)."""
    if secrets._keys is None:
        session = secrets.session
        roster = _roster_before(store, session, "keys", secrets.mine)
        secrets._keys = _public_keys(store, session, roster)
    return secrets._keys


# --- signed messages (soma.round.signing), when the run has a roster ------------------------


def _check_signed(
    store: Store, session: Session, digest: str, name: str, writer: int | None
) -> None:
    """Refuse the message `digest` at `name` unless client `writer` (None: anyone on the
    roster) signed it; nothing to check without a roster."""
    what = f"{session.what}: " + ("a message" if writer is None else f"client {writer}'s message")
    signatures.check(store, session.signing, digest, name=name, writer=writer, what=what)


def _check_present(
    store: Store, session: Session, phase: str, here: Mapping[int, str], out: Iterable[int]
) -> None:
    """Before a roster is claimed: every record it takes, and every withdrawal it goes on
    without, signed by its client."""
    if session.signing is None:
        return
    for k, digest in here.items():
        _check_signed(store, session, digest, session.name(phase, k), k)
    for k, digest in _clients_in(store, session.name("withdrawn") + "/", out).items():
        _check_signed(store, session, digest, session.name("withdrawn", k), k)


def _anyone(session: Session) -> int | None:
    """Who signs what any member may write (a roster, the sum): a roster member whose key
    this process holds (refused when none); None without a roster."""
    return None if session.signing is None else session.signing.any_member(session.members)


def _put_signed(store: Store, session: Session, value: dict, name: str, by: int | None) -> str:
    return signatures.put(store, session.signing, value, name=name, by=by)


def _write_signed(
    store: Store, session: Session, phase: str, mine: int, value: dict, what: str
) -> str:
    """Client `mine`'s message of `phase`, signed by it, written once."""
    name = session.name(phase, mine)
    return _write_once(
        store, name, signatures.signed(store, session.signing, value, name=name, by=mine), what
    )


# --- the crypto each phase uses (module attributes, so tests/mutants.py can break them) -------


def _share_key(private: Any, peer: bytes, session: Session, a: int, b: int) -> bytes:
    info = crypto.label("share-key", session.prefix, min(a, b), max(a, b))
    return crypto.agree(private, peer, info, whose=f"client {b}")


def _pair_seed(private: Any, peer: bytes, session: Session, a: int, b: int) -> bytes:
    info = crypto.label("mask", session.prefix, min(a, b), max(a, b))
    return crypto.agree(private, peer, info, whose=f"client {b}")


def _share_binding(session: Session, sender: int, recipient: int) -> bytes:
    return crypto.label("share", session.prefix, sender, recipient)


SHARE_BYTES = (shamir.PRIME.bit_length() + 7) // 8  # 66: one field element


def _share_bytes(value: int) -> bytes:
    return value.to_bytes(SHARE_BYTES, "big")


def _seal(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """A share's encryption to its recipient (AES-GCM; see soma.secagg.crypto)."""
    return crypto.seal(key, plaintext, associated)


def _open(key: bytes, sealed: bytes, associated: bytes) -> bytes | None:
    return crypto.open_(key, sealed, associated)


def _add_self_mask(flat: np.ndarray, secrets: Secrets) -> None:
    masks.add(flat, secrets._b, 1)


def _add_pairwise_masks(
    flat: np.ndarray, secrets: Secrets, keys: Mapping[int, dict], sharers: Iterable[int]
) -> None:
    for v in sharers:
        if v != secrets.mine:
            seed = _pair_seed(secrets._s, keys[v]["s"], secrets.session, secrets.mine, v)
            masks.add(flat, seed, masks.pairwise_sign(secrets.mine, v))


def _remove_self_masks(acc: np.ndarray, seeds: Iterable[bytes]) -> None:
    for seed in seeds:
        masks.add(acc, seed, -1)


def _remove_dropped_masks(
    acc: np.ndarray,
    session: Session,
    dropped: Mapping[int, Any],
    keys: Mapping[int, dict],
    contributors: Iterable[int],
) -> None:
    """Take off what each contributor u added for its pair with each dropped client d."""
    contributors = list(contributors)
    for d, private in dropped.items():
        for u in contributors:
            seed = _pair_seed(private, keys[u]["s"], session, d, u)
            masks.add(acc, seed, -masks.pairwise_sign(u, d))


# --- the export as ring elements ------------------------------------------------------------


Layout = list[tuple[str, str, tuple[int, ...], str]]  # (node, key, shape, dtype), sorted


def _size_value(size: object, mine: int, what: str) -> float:
    if size is None:
        return 1.0
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise BadInput(f"{what}: client {mine}'s size is {size!r}, not a number")
    value = float(size)
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"{what}: client {mine}'s size is {size!r}; sizes are >= 0 and finite")
    return value


def _layout(export: object, mine: int, what: str) -> Layout:
    if not isinstance(export, Mapping) or not export:
        raise BadInput(
            f"{what}: client {mine}'s export is not a non-empty {{node: {{key: tensor}}}}"
        )
    layout: Layout = []
    for node in sorted(export):
        keys = export[node]
        if not isinstance(node, str) or not isinstance(keys, Mapping) or not keys:
            raise BadInput(
                f"{what}: client {mine}'s node {node!r} is not a non-empty map of tensors"
            )
        for key in sorted(keys):
            tensor = keys[key]
            where = f"client {mine}, node {node!r} key {key!r}"
            if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
                raise BadInput(f"{what}: {where} is not a tensor under a text key")
            if not tensor.dtype.is_floating_point:
                raise BadInput(
                    f"{what}: {where} is {tensor.dtype}; only floating-point tensors are summed "
                    "securely (a count's mean is not a count, and keeping one client's would "
                    "reveal it): leave it out of the export"
                )
            layout.append(
                (node, key, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
            )
    return layout


def _quantized(
    session: Session, mine: int, export: Export, size: float | None
) -> tuple[Layout, np.ndarray]:
    """(layout, q(size * export) then q(size)) as one flat array of ring elements; refused,
    naming client, node and key, if anything is not finite or breaks the overflow bound."""
    what = session.what
    weight = _size_value(size, mine, what)
    layout = _layout(export, mine, what)
    fixed, parties = session.fixed, len(session.members)
    count = sum(math.prod(shape) for _, _, shape, _ in layout)
    flat = np.empty(count + 1, dtype=fixed.dtype)
    flat[count:] = fixed.encode(np.array([weight]), parties, f"{what}: client {mine}'s size")
    at = 0
    for node, key, _shape, _ in layout:
        values = export[node][key].detach().to("cpu", torch.float64).reshape(-1).numpy()
        n = values.size
        where = f"{what}: client {mine}, node {node!r} key {key!r} (times its size {weight:g})"
        flat[at : at + n] = fixed.encode(values * weight, parties, where)
        at += n
    return layout, flat


def check_input(session: Session, mine: int, export: Export, size: float | None) -> None:
    """Refuse, before anything is written, an export or size that cannot be summed securely:
    not floating point, not finite, or above the overflow bound (see soma.secagg.quantize)."""
    session.check_member(mine)
    _quantized(session, mine, export, size)


def _tensors(layout: Layout, flat: np.ndarray) -> dict[str, dict[str, torch.Tensor]]:
    out: dict[str, dict[str, torch.Tensor]] = {}
    at = 0
    for node, key, shape, _ in layout:
        n = math.prod(shape)
        out.setdefault(node, {})[key] = torch.from_numpy(flat[at : at + n].reshape(shape).copy())
        at += n
    return out


def _ring_tensors(layout: Layout, flat: np.ndarray) -> dict[str, torch.Tensor]:
    """A masked input's ring elements as one tensor map (one blob): "<i>" is the i-th entry of
    the layout, shaped as it, and "size" the masked size."""
    out: dict[str, torch.Tensor] = {}
    at = 0
    for i, (_, _, shape, _) in enumerate(layout):
        n = math.prod(shape)
        out[str(i)] = torch.from_numpy(flat[at : at + n].reshape(shape).copy())
        at += n
    out["size"] = torch.from_numpy(flat[at:].copy())
    return out


def _flat(layout: Layout, value: Mapping[str, Any], dtype: type, where: str) -> np.ndarray:
    """A masked input's ring tensors back as one flat array, in layout order, size last."""
    parts = []
    try:
        for i, (node, key, shape, _) in enumerate(layout):
            tensor = value["ring"][str(i)]
            if tuple(tensor.shape) != shape:
                raise SecAggError(
                    f"{where}: node {node!r} key {key!r} is shaped {tuple(tensor.shape)}"
                )
            parts.append(tensor.numpy().reshape(-1))
        parts.append(value["ring"]["size"].numpy().reshape(-1))
    except (KeyError, TypeError, AttributeError):
        raise SecAggError(f"{where}: not a masked input of this layout") from None
    flat = np.concatenate(parts)
    if flat.dtype != dtype or flat.size != sum(math.prod(s) for _, _, s, _ in layout) + 1:
        raise SecAggError(f"{where}: not a masked input of this layout and ring")
    return flat


def _layout_of(record: Mapping[str, Any], where: str) -> Layout:
    try:
        return [
            (str(n), str(k), tuple(int(d) for d in s), str(t)) for n, k, s, t in record["layout"]
        ]
    except (KeyError, TypeError, ValueError):
        raise SecAggError(f"{where} has no layout") from None


# --- the phases ------------------------------------------------------------------------------


def advertise(store: Store, session: Session, mine: int) -> Secrets:
    """Phase 1: make this client's keys and self-mask seed, publish the public half.

    The session is written down by the first client (a client with another is refused). The
    private half is returned, and is never written anywhere: keep it for the other phases.
    """
    session.check_member(mine)
    signatures.holds(session.signing, mine)
    _settle_about(store, session, mine)
    secrets = Secrets(session, mine)
    _write_signed(store, session, "keys", mine, secrets.public(), f"client {mine}'s keys")
    return secrets


def share(
    store: Store,
    session: Session,
    secrets: Secrets,
    *,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
) -> list[int]:
    """Phase 2: once the keys are there, share b and s among them, each share encrypted to its
    recipient; the clients that advertised (the keys roster)."""
    keys_digest = _roster_digest(store, session, "keys", deadline=deadline, backoff=backoff)
    keys_roster = _read_roster(store, session, "keys", keys_digest)
    _must_be_in(keys_roster, secrets, "keys")
    keys = _public_keys(store, session, keys_roster)
    mine, t = secrets.mine, session.threshold
    xs = [k + 1 for k in keys]
    b_shares = shamir.split(shamir.from_bytes(secrets._b), xs, t)
    s_shares = shamir.split(shamir.from_bytes(crypto.private_bytes(secrets._s)), xs, t)
    recipients = [v for v in keys if v != mine]
    sealed = []
    for v in recipients:
        plaintext = _share_bytes(b_shares[v + 1]) + _share_bytes(s_shares[v + 1])
        key = _share_key(secrets._c, keys[v]["c"], session, mine, v)
        secrets._share_keys[v] = key
        sealed.append(_seal(key, plaintext, _share_binding(session, mine, v)))
    secrets._own = (b_shares[mine + 1], s_shares[mine + 1])
    secrets._keys = keys
    widths = {len(c) for c in sealed}
    assert len(widths) <= 1, "every sealed pair of shares is as long as the others"
    # one hex string, not one entry a recipient: a record read n times by n clients. The
    # recipients are the keys roster's clients but the sender, in order; the record names it.
    record = {
        "client": mine,
        "keys": keys_digest,
        "width": widths.pop() if widths else 0,
        "sealed": b"".join(sealed).hex(),
    }
    _write_signed(store, session, "shares", mine, record, f"client {mine}'s shares")
    return sorted(keys)


def masked_input(
    store: Store,
    session: Session,
    secrets: Secrets,
    export: Export,
    size: float | None,
    *,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
) -> list[int]:
    """Phase 3: once the shares are there, write y = q(size * export) + self-mask + pairwise
    masks (the size one more masked element); the clients that shared (the shares roster).

    The export is checked (and refused, naming client, node and key) before waiting. `size`
    None weighs the export 1.
    """
    layout, flat = _quantized(session, secrets.mine, export, size)
    sharers = _roster(store, session, "shares", deadline=deadline, backoff=backoff)
    _must_be_in(sharers, secrets, "shares")
    keys = _keys_of(store, secrets)
    _claim_masking(store, session, secrets.mine)
    _add_self_mask(flat, secrets)
    _add_pairwise_masks(flat, secrets, keys, sorted(sharers))
    record = {
        "client": secrets.mine,
        "layout": [[n, k, list(s), t] for n, k, s, t in layout],
        "ring": _ring_tensors(layout, flat),
    }
    mine = secrets.mine
    _write_signed(store, session, "masked", mine, record, f"client {mine}'s masked input")
    return sorted(sharers)


def _claim_masking(store: Store, session: Session, mine: int) -> None:
    """Claim client `mine`'s one masking of the session, before any mask is added or anything
    masked is written: a second attempt with the same secrets (a rerun job) is refused here,
    so the store never holds two inputs under one mask (their difference would be in clear)."""
    name = session.name("masking", mine)
    if not store.claim(name, store.put_value({"client": mine, "by": holders.me()})):
        raise MaskedOnce(
            f"{session.what}: client {mine}'s masking was already claimed ({name!r}, by an "
            "earlier attempt): its masks are used once, so this attempt writes nothing masked"
        )


def _sealed_for(
    record: Mapping[str, Any], sender: int, recipient: int, keys: tuple[str, list[int]]
) -> bytes | None:
    """The ciphertext for `recipient` in `sender`'s shares record, if there is one; `keys` is
    the keys roster (digest, clients), whose clients but the sender are the recipients."""
    width, sealed = record.get("width"), record.get("sealed")
    to = [k for k in keys[1] if k != sender]
    if record.get("client") != sender or record.get("keys") != keys[0] or recipient not in to:
        return None
    if not _is_int(width) or not isinstance(sealed, str) or len(sealed) != 2 * width * len(to):
        return None
    at = to.index(recipient) * width * 2
    try:
        return bytes.fromhex(sealed[at : at + 2 * width])
    except ValueError:
        return None


def received_shares(store: Store, session: Session, secrets: Secrets) -> dict[int, tuple[int, int]]:
    """{sender: (share of its b, share of its s)} this client was sent, decrypted, its own too."""
    mine = secrets.mine
    if secrets._own is None:
        raise SecAggError(f"{session.what}: client {mine} never shared, so it was sent nothing")
    sharers = _roster_before(store, session, "shares", mine)
    keys = _keys_of(store, secrets)
    keys_digest = store.resolve(session.name("roster", "keys")) or ""
    roster = (keys_digest, sorted(keys))
    received = {mine: secrets._own}
    for u, digest in sharers.items():
        if u == mine:
            continue
        _check_signed(store, session, digest, session.name("shares", u), u)
        record = _record(store, digest, f"client {u}'s shares")
        ciphertext = _sealed_for(record, u, mine, roster)
        if ciphertext is None:
            raise SecAggError(f"{session.what}: client {u} sent no share to client {mine}")
        key = secrets._share_keys.get(u) or _share_key(secrets._c, keys[u]["c"], session, mine, u)
        plaintext = _open(key, ciphertext, _share_binding(session, u, mine))
        if plaintext is not None and len(plaintext) == 2 * SHARE_BYTES:
            b_share = int.from_bytes(plaintext[:SHARE_BYTES], "big")
            s_share = int.from_bytes(plaintext[SHARE_BYTES:], "big")
            received[u] = (b_share, s_share)
        if u not in received or max(received[u]) >= shamir.PRIME:
            raise SecAggError(
                f"{session.what}: the share client {u} sent to client {mine} does not decrypt "
                "to a share from it to us (changed, or not ours)"
            )
    return dict(sorted(received.items()))


def withdraw(store: Store, session: Session, mine: int, why: str) -> None:
    """Say that client `mine` will not go on (its training failed, its export was refused):
    the barriers after it then go on without waiting for it until their deadline. Its
    secrets were shared, so the sum is unmasked without it (with at least the threshold)."""
    session.check_member(mine)
    signatures.holds(session.signing, mine)
    record = {"client": mine, "why": str(why)}
    name = session.name("withdrawn", mine)
    store.claim(name, _put_signed(store, session, record, name, mine))


def reveal(
    store: Store,
    session: Session,
    secrets: Secrets,
    *,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
) -> list[int]:
    """Phase 4: once the masked inputs are there, publish the shares that unmask their sum: of
    b for each client that contributed, of s for each that shared and dropped out (never both
    of one client); the clients that contributed (the masked roster)."""
    masked = _roster_digest(store, session, "masked", deadline=deadline, backoff=backoff)
    contributors = _read_roster(store, session, "masked", masked)
    _must_be_in(contributors, secrets, "masked")
    if session.signing is not None:  # the malicious-server variant's consistency check
        confirm(store, session, secrets, deadline=deadline, backoff=backoff)
        consistent(store, session, secrets.mine, masked, deadline=deadline, backoff=backoff)
    received = received_shares(store, session, secrets)
    dropped = [d for d in received if d not in contributors]
    both = set(contributors) & set(dropped)
    assert not both, f"clients {both} both contributed and dropped"
    record = {
        "client": secrets.mine,
        "b": {str(u): format(received[u][0], "x") for u in contributors},
        "s": {str(d): format(received[d][1], "x") for d in dropped},
    }
    mine = secrets.mine
    _write_signed(store, session, "reveal", mine, record, f"client {mine}'s revealed shares")
    return sorted(contributors)


# --- the consistency check (Bonawitz et al.'s malicious-server variant), with a roster -------


class SplitRoster(SecAggError):
    """Two clients of a secure sum were shown different survivors (masked rosters): revealing
    could hand out both halves of one client's mask. Names the client whose signed set differs."""


def confirm(
    store: Store,
    session: Session,
    secrets: Secrets,
    *,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
) -> str:
    """Client `secrets.mine` signs the survivors it saw (the masked roster, by digest), under
    `confirmed/<k>`, before anything is revealed; the roster's digest. A process hosting
    several clients confirms for all of them before any reveals (see `consistent`)."""
    masked = _roster_digest(store, session, "masked", deadline=deadline, backoff=backoff)
    contributors = _read_roster(store, session, "masked", masked)
    _must_be_in(contributors, secrets, "masked")
    mine = secrets.mine
    record = {"client": mine, "masked": masked, "survivors": sorted(contributors)}
    _write_signed(store, session, "confirmed", mine, record, f"client {mine}'s survivors")
    return masked


def consistent(
    store: Store,
    session: Session,
    mine: int,
    masked: str,
    *,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """Wait until at least the threshold of the survivors signed the very survivors client
    `mine` saw (`masked`, the roster's digest); any that signed others is refused by name
    (SplitRoster), before anything is revealed. The clients that confirmed."""
    contributors = _read_roster(store, session, "masked", masked)
    started, delays = time.monotonic(), backoff.delays()
    while True:
        here = _clients_in(store, session.name("confirmed") + "/", contributors)
        for k, digest in here.items():
            _check_signed(store, session, digest, session.name("confirmed", k), k)
            said = _record(store, digest, f"client {k}'s survivors")
            if said.get("client") != k or said.get("masked") != masked:
                raise SplitRoster(
                    f"{session.what}: client {k} signed other survivors "
                    f"({said.get('survivors')!r}, roster {str(said.get('masked'))[:12]}) than "
                    f"client {mine} saw ({sorted(contributors)}, roster {masked[:12]}): the "
                    "store showed them different rosters; nothing is revealed"
                )
        if len(here) >= min(session.threshold, len(contributors)):
            return sorted(here)
        if deadline is not None and time.monotonic() - started > deadline:
            never = [k for k in contributors if k not in here]
            raise BelowThreshold(
                f"{session.what}: after {deadline:g}s, {len(here)} of the {len(contributors)} "
                f"survivors signed what they saw, {session.threshold} needed (the threshold): "
                f"{_plural(never)} never did; nothing is revealed",
                missing=never,
                dropped=[],
                have=len(here),
                need=session.threshold,
            )
        sleep(next(delays))


# --- unmasking: once, by whoever claims it ---------------------------------------------------


class _Unmasking:
    """The unmasking as soma.round.once asks about it; the inputs: the revealers' records."""

    def __init__(self, store: Store, session: Session) -> None:
        self.store, self.session, self.what = store, session, session.what

    def done(self) -> str | None:
        return self.store.resolve(self.session.name("sum"))

    def ready(self, past: bool) -> tuple[tuple[int, str], ...] | None:
        session = self.session
        contributors = _roster_now(self.store, session, "masked")
        if contributors is None:
            if past:
                raise SecAggError(
                    f"{self.what}: no masked inputs were agreed on before the deadline: the "
                    "clients never got as far as revealing"
                )
            return None
        revealed = _clients_in(self.store, session.name("reveal") + "/", contributors)
        if len(revealed) == len(contributors) or (past and len(revealed) >= session.threshold):
            return tuple(sorted(revealed.items()))
        if past:
            raise self._below(contributors, revealed)
        return None

    def _below(
        self, contributors: Mapping[int, str], revealed: Mapping[int, str]
    ) -> BelowThreshold:
        session = self.session
        sharers = _roster_before(self.store, session, "shares", None)
        dropped = [d for d in sharers if d not in contributors]
        never = [k for k in contributors if k not in revealed]
        have, need = len(revealed), session.threshold
        return BelowThreshold(
            f"{self.what}: cannot remove the masks: {have} of the {len(contributors)} clients that "
            f"contributed revealed their shares ({_plural(sorted(revealed))}; "
            f"{_plural(never)} never did), so there are {have} shares of each secret and {need} "
            f"are needed (the threshold). Dropped out after sharing: {_plural(dropped)}",
            missing=never,
            dropped=dropped,
            have=have,
            need=need,
        )

    def check(self, inputs: tuple[tuple[int, str], ...]) -> None:
        """Everything refusable, before anything is claimed: layouts that differ, a reveal that
        lacks a share it must give."""
        store, session = self.store, self.session
        contributors = _roster_before(store, session, "masked", None)
        sharers = _roster_before(store, session, "shares", None)
        dropped = {str(d) for d in sharers if d not in contributors}
        first: tuple[int, Layout] | None = None
        for u, digest in contributors.items():
            where = f"client {u}'s masked input"
            _check_signed(store, session, digest, session.name("masked", u), u)
            layout = _layout_of(_tree(store, digest, where), where)
            if first is None:
                first = (u, layout)
            elif layout != first[1]:
                raise SecAggError(
                    f"{self.what}: clients {first[0]} and {u} sent masked inputs of two different "
                    "networks (nodes, keys, shapes or dtypes differ)"
                )
        _anyone(session)  # a roster member's key signs the sum, or refused before the claim
        for v, digest in inputs:
            _check_signed(store, session, digest, session.name("reveal", v), v)
            record = _record(store, digest, f"client {v}'s revealed shares")
            b, s = record.get("b"), record.get("s")
            if (
                record.get("client") != v
                or not isinstance(b, dict)
                or not isinstance(s, dict)
                or set(b) != {str(u) for u in contributors}
                or set(s) != dropped
            ):
                raise SecAggError(
                    f"{self.what}: client {v}'s revealed shares are not one share of b for each "
                    "client that contributed and one of s for each that dropped out"
                )

    def place(self, inputs: tuple[tuple[int, str], ...]) -> Place:
        return Place(self.session.name("unmasked"))

    def compute(self, inputs: tuple[tuple[int, str], ...], me: dict[str, Any]) -> str:
        return _unmask(self.store, self.session, dict(inputs), me)

    def settle(self, published: str) -> str:
        name = self.session.name("sum")
        if self.store.resolve(name) is None:
            once.publish(self.store, name, published)
        return self.store.resolve(name) or published

    def missing(self) -> tuple[list[int], str]:
        contributors = _roster_now(self.store, self.session, "masked") or {}
        revealed = _clients_in(self.store, self.session.name("reveal") + "/", contributors)
        return [k for k in contributors if k not in revealed], " (their shares were not revealed)"


def _rebuild(
    combiner: shamir.Combiner,
    reveals: Mapping[int, Mapping[str, Any]],
    half: str,
    client: int,
    what: str,
) -> bytes:
    """One secret (`half` "b" or "s" of `client`) from the revealed shares, in the order of
    the combiner's x's (x = revealer + 1)."""
    try:
        ys = [int(reveals[x - 1][half][str(client)], 16) for x in combiner.xs]
    except (KeyError, TypeError, ValueError):
        raise SecAggError(f"{what}: a revealed share is missing or not a number") from None
    return shamir.to_bytes(combiner.secret(ys, what), what)


def _unmask(store: Store, session: Session, revealed: Mapping[int, str], me: dict[str, Any]) -> str:
    """Rebuild the secrets, strip the masks off the sum, publish it; the record's digest."""
    keys = _public_keys(store, session, _roster_before(store, session, "keys", None))
    sharers = _roster_before(store, session, "shares", None)
    contributors = _roster_before(store, session, "masked", None)
    dropped = [d for d in sharers if d not in contributors]
    reveals = {v: _record(store, d, f"client {v}'s revealed shares") for v, d in revealed.items()}
    combiner = shamir.Combiner(
        [v + 1 for v in sorted(reveals)], session.threshold, what=f"{session.what}'s secrets"
    )
    seeds = []
    for u in contributors:
        what = f"{session.what}: client {u}'s self-mask seed"
        seed = _rebuild(combiner, reveals, "b", u, what)
        if _commitment(session, u, seed) != keys[u]["b_commitment"]:
            raise InconsistentShares(f"{what}: its shares do not rebuild the seed it committed to")
        seeds.append(seed)
    lost = {}
    for d in dropped:
        what = f"{session.what}: dropped client {d}'s mask key"
        private = crypto.private_from_bytes(_rebuild(combiner, reveals, "s", d, what))
        if crypto.public_bytes(private) != keys[d]["s"]:
            raise InconsistentShares(f"{what}: its shares do not rebuild the key it published")
        lost[d] = private
    fixed = session.fixed
    layout: Layout | None = None
    acc: np.ndarray | None = None
    for u, digest in contributors.items():
        where = f"{session.what}: client {u}'s masked input"
        value = store.recall_digest(digest, lazy=True)
        layout = _layout_of(value, where)
        flat = _flat(layout, value, fixed.dtype, where)
        if acc is None:
            acc = flat.copy()
        else:
            np.add(acc, flat, out=acc)
        del value, flat
    assert acc is not None and layout is not None
    _remove_self_masks(acc, seeds)
    _remove_dropped_masks(acc, session, lost, keys, contributors)
    values = fixed.decode(acc)
    weighted = _tensors(layout, values[:-1])
    result = {
        "secagg": VERSION,
        "weighted": weighted,
        "total": float(values[-1]),
        "layout": [[n, k, list(s), t] for n, k, s, t in layout],
        "members": list(session.members),
        "contributors": sorted(contributors),
        "dropped": dropped,
        "never_shared": [k for k in keys if k not in sharers],
        "never_advertised": [k for k in session.members if k not in keys],
        "revealed_by": sorted(reveals),
        "threshold": session.threshold,
        "precision_bits": session.precision_bits,
        "ring_bits": session.ring_bits,
        "error_bound": fixed.error(len(contributors)),
        "unmasked_by": me,
    }
    return _put_signed(store, session, result, session.name("sum"), _anyone(session))


def _sum_of(store: Store, digest: str, what: str) -> tuple[Export, float]:
    record = store.recall_digest(digest)
    if not isinstance(record, dict) or record.get("secagg") != VERSION:
        raise SecAggError(f"{what}: the published sum {digest} is not one")
    return record["weighted"], float(record["total"])


def unmask(
    store: Store,
    session: Session,
    *,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
) -> tuple[Export, float]:
    """Phase 5: the weighted sum (float64 tensors) and the total size, unmasked once.

    Any process may call it (a client, or an averaging job with `Session.read`). It waits for
    every contributor's revealed shares, or past the deadline for at least the threshold of
    them; below it, `BelowThreshold` names the dropped clients and how many shares there are
    against how many are needed. Whoever claims the work computes and publishes (soma.round.once: a
    holder proven gone is taken over); everyone else waits for what was published, and past
    the deadline an AveragerDied (soma.round.once) names who claimed it and never published.
    """
    if Session.read(store, session.prefix) != session:
        raise SecAggError(f"{session.what}: not the session written down at {session.prefix!r}")
    work = _Unmasking(store, session)
    digest = once.once(store, work, deadline=deadline, backoff=backoff)
    _check_signed(store, session, digest, session.name("sum"), None)
    return _sum_of(store, digest, session.what)


def published(store: Store, prefix: str) -> dict[str, Any] | None:
    """The published result record at `prefix` (weighted, total, contributors, dropped, ...),
    or None while there is none."""
    digest = store.resolve(layout.session(prefix, "sum"))
    return None if digest is None else store.recall_digest(digest)


def result(
    store: Store, prefix: str, *, deadline: float | None = DEADLINE, backoff: Backoff = POLL
) -> tuple[Export, float]:
    """Wait for the sum at `prefix` to be published; (weighted, total). For a client that was
    left out, or any process that only wants the answer."""
    started = time.monotonic()
    for delay in backoff.delays():
        digest = store.resolve(layout.session(prefix, "sum"))
        if digest is not None:
            return _sum_of(store, digest, f"secure sum {prefix!r}")
        if deadline is not None and time.monotonic() - started > deadline:
            raise SecAggError(f"secure sum {prefix!r}: nothing published after {deadline:g}s")
        time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def average(weighted: Export, total: float, like: Export | None = None) -> Export:
    """weighted / total, node by node: the FedAvg mean, in `like`'s dtypes (else float64)."""
    if not isinstance(total, numbers.Real) or not math.isfinite(total) or total <= 0:
        raise SecAggError(f"the total size is {total!r}: there is no mean to take")
    out: Export = {}
    for node, keys in weighted.items():
        out[node] = {}
        for key, tensor in keys.items():
            mean = tensor.to(torch.float64) / total
            dtype = like[node][key].dtype if like is not None else torch.float64
            out[node][key] = mean.to(dtype)
    return out


def secure_sum(
    store: Store,
    prefix: str,
    export: Export,
    size: float | None,
    *,
    mine: int,
    members: Iterable[int],
    threshold: int,
    deadline: float | None = DEADLINE,
    precision_bits: int = DEFAULT_PRECISION_BITS,
    ring_bits: int = DEFAULT_RING_BITS,
    backoff: Backoff = POLL,
) -> tuple[Export, float]:
    """All the phases for one client: (sum of size * export over the contributors, their total
    size). Every member calls it, with the same prefix, members, threshold and fixed point.

    Blocks at each barrier (`deadline` seconds each); one of the clients unmasks and publishes,
    everyone leaves with the same answer. A client arriving after the sum was published gets
    it at once. The export is refused (`BadInput`) before anything is written. A client left
    out of a phase gets `LeftOut` (`result` then waits for the others' sum); too few clients
    to go on, `BelowThreshold`.
    """
    session = Session(prefix, tuple(members), threshold, precision_bits, ring_bits)
    digest = store.resolve(session.name("sum"))
    if digest is not None:
        return _sum_of(store, digest, session.what)
    check_input(session, mine, export, size)
    secrets = advertise(store, session, mine)
    share(store, session, secrets, deadline=deadline, backoff=backoff)
    masked_input(store, session, secrets, export, size, deadline=deadline, backoff=backoff)
    reveal(store, session, secrets, deadline=deadline, backoff=backoff)
    return unmask(store, session, deadline=deadline, backoff=backoff)
