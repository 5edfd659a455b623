"""A client's phases 1 to 4: advertise, share, masked input, reveal (and withdraw).

Each starts with the barrier on the phase before (soma.secagg.roster); what they apply is
soma.secagg.masking's, and the reveal's consistency check soma.secagg.consistency's.
Phase 5 is soma.secagg.unmask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from soma.nodes import Export
from soma.round import holders
from soma.round import signing as signatures
from soma.round.once import POLL, Backoff
from soma.secagg import consistency, crypto, masking, shamir
from soma.secagg.errors import MaskedOnce, SecAggError
from soma.secagg.messages import check_signed, put_signed, record_of, write_signed
from soma.secagg.ring import quantized, ring_tensors
from soma.secagg.roster import (
    barrier,
    barrier_digest,
    check_own,
    keys_of,
    must_be_in,
    public_keys,
    read_roster,
    roster_before,
)
from soma.secagg.session import Secrets, Session, is_int, settle_about
from soma.store import Store


def advertise(store: Store, session: Session, mine: int) -> Secrets:
    """Phase 1: make this client's keys and self-mask seed, publish the public half.

    The session is written down by the first client (a client with another is refused). The
    private half is returned, and is never written anywhere: keep it for the other phases.
    """
    session.check_member(mine)
    signatures.holds(session.signing, mine)
    settle_about(store, session, mine)
    secrets = Secrets(session, mine)
    write_signed(store, session, "keys", mine, secrets.public(), f"client {mine}'s keys")
    return secrets


def share(
    store: Store,
    session: Session,
    secrets: Secrets,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
) -> list[int]:
    """Phase 2: once the keys are there, share b and s among them, each share encrypted to its
    recipient; the clients that advertised (the keys roster)."""
    check_own(store, secrets)
    keys_digest = barrier_digest(store, session, "keys", deadline=deadline, backoff=backoff)
    keys_roster = read_roster(store, session, "keys", keys_digest)
    must_be_in(keys_roster, secrets, "keys")
    keys = public_keys(store, session, keys_roster)
    mine, t = secrets.mine, session.threshold
    xs = [k + 1 for k in keys]
    b_shares = shamir.split(shamir.from_bytes(secrets._b), xs, t)
    s_shares = shamir.split(shamir.from_bytes(crypto.private_bytes(secrets._s)), xs, t)
    recipients = [v for v in keys if v != mine]
    sealed = []
    for v in recipients:
        plaintext = masking.share_bytes(b_shares[v + 1]) + masking.share_bytes(s_shares[v + 1])
        key = masking.share_key(secrets._c, keys[v]["c"], session, mine, v)
        secrets._share_keys[v] = key
        sealed.append(crypto.seal(key, plaintext, masking.share_binding(session, mine, v)))
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
    write_signed(store, session, "shares", mine, record, f"client {mine}'s shares")
    return sorted(keys)


def masked_input(
    store: Store,
    session: Session,
    secrets: Secrets,
    export: Export,
    size: float | None,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
) -> list[int]:
    """Phase 3: once the shares are there, write y = q(size * export) + self-mask + pairwise
    masks (the size one more masked element); the clients that shared (the shares roster).

    The export is checked (and refused, naming client, node and key) before waiting. `size`
    None weighs the export 1.
    """
    check_own(store, secrets)
    layout, flat = quantized(session, secrets.mine, export, size)
    sharers = barrier(store, session, "shares", deadline=deadline, backoff=backoff)
    must_be_in(sharers, secrets, "shares")
    keys = keys_of(store, secrets)
    claim_masking(store, session, secrets.mine)
    masking.add_self_mask(flat, secrets)
    masking.add_pairwise_masks(flat, secrets, keys, sorted(sharers))
    record = {
        "client": secrets.mine,
        "layout": [[n, k, list(s), t] for n, k, s, t in layout],
        "ring": ring_tensors(layout, flat),
    }
    mine = secrets.mine
    write_signed(store, session, "masked", mine, record, f"client {mine}'s masked input")
    return sorted(sharers)


def claim_masking(store: Store, session: Session, mine: int) -> None:
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
    if not is_int(width) or not isinstance(sealed, str) or len(sealed) != 2 * width * len(to):
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
    sharers = roster_before(store, session, "shares", mine)
    keys = keys_of(store, secrets)
    keys_digest = store.resolve(session.name("roster", "keys")) or ""
    roster = (keys_digest, sorted(keys))
    received = {mine: secrets._own}
    for u, digest in sharers.items():
        if u == mine:
            continue
        check_signed(store, session, digest, session.name("shares", u), u)
        record = record_of(store, digest, f"client {u}'s shares")
        ciphertext = _sealed_for(record, u, mine, roster)
        if ciphertext is None:
            raise SecAggError(f"{session.what}: client {u} sent no share to client {mine}")
        key = secrets._share_keys.get(u) or masking.share_key(
            secrets._c, keys[u]["c"], session, mine, u
        )
        plaintext = crypto.open_(key, ciphertext, masking.share_binding(session, u, mine))
        if plaintext is not None and len(plaintext) == 2 * masking.SHARE_BYTES:
            b_share = int.from_bytes(plaintext[: masking.SHARE_BYTES], "big")
            s_share = int.from_bytes(plaintext[masking.SHARE_BYTES :], "big")
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
    store.claim(name, put_signed(store, session, record, name, mine))


def reveal(
    store: Store,
    session: Session,
    secrets: Secrets,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
) -> list[int]:
    """Phase 4: once the masked inputs are there, publish the shares that unmask their sum: of
    b for each client that contributed, of s for each that shared and dropped out (never both
    of one client); the clients that contributed (the masked roster)."""
    check_own(store, secrets)
    masked = barrier_digest(store, session, "masked", deadline=deadline, backoff=backoff)
    contributors = read_roster(store, session, "masked", masked)
    must_be_in(contributors, secrets, "masked")
    if session.signing is not None:  # the malicious-server variant's consistency check
        consistency.confirm(store, session, secrets, deadline=deadline, backoff=backoff)
        consistency.consistent(
            store, session, secrets.mine, masked, deadline=deadline, backoff=backoff
        )
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
    write_signed(store, session, "reveal", mine, record, f"client {mine}'s revealed shares")
    return sorted(contributors)
