"""Secure aggregation on a shared folder, with nobody in charge: every phase a barrier in the store.

After Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning"
(CCS 2017), in its honest-but-curious form, over soma's store instead of a server. Each client
of a session contributes size * export (its export weighted by its size) and its size; the
store ends up holding their sum, and whoever claims the unmasking learns that sum and the total
size, and nothing else about any one client's export or size. So does anyone else who can read
the shared folder: everything the unmasker reads is in the store, and nothing in the store
gives a client's export away.

    weighted, total = secure_sum(store, "run/round/3/secagg", export, size, mine=k,
                                 members=range(10), threshold=6, deadline=600, lease=60)
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

Where each piece lives: the session and a client's secrets (`session`); messages written
once, read by digest, signed (`messages`); barriers and rosters (`roster`); the export as ring
elements (`ring`); the crypto each phase applies (`masking`); phases 1-4 (`phases`); the
consistency check (`consistency`); phase 5 and reading the result (`unmask`). This module
runs them all for one client (`secure_sum`).
"""

from __future__ import annotations

from collections.abc import Iterable

from soma.nodes import Export
from soma.round.once import POLL, Backoff
from soma.secagg.phases import advertise, masked_input, reveal, share
from soma.secagg.quantize import DEFAULT_PRECISION_BITS, DEFAULT_RING_BITS
from soma.secagg.ring import check_input
from soma.secagg.session import Session
from soma.secagg.unmask import sum_of, unmask
from soma.store import Store

__all__ = ["secure_sum"]


def secure_sum(
    store: Store,
    prefix: str,
    export: Export,
    size: float | None,
    *,
    mine: int,
    members: Iterable[int],
    threshold: int,
    deadline: float | None,
    lease: float,
    precision_bits: int = DEFAULT_PRECISION_BITS,
    ring_bits: int = DEFAULT_RING_BITS,
    backoff: Backoff = POLL,
) -> tuple[Export, float]:
    """All the phases for one client: (sum of size * export over the contributors, their total
    size). Every member calls it, with the same prefix, members, threshold and fixed point.

    Blocks at each barrier (`deadline` seconds each); one of the clients unmasks and publishes
    (on a bucket its claim leased for `lease` seconds), everyone leaves with the same answer.
    A client arriving after the sum was published gets it at once. The export is refused
    (`BadInput`) before anything is written. A client left out of a phase gets `LeftOut`
    (`result` then waits for the others' sum); too few clients to go on, `BelowThreshold`.
    """
    session = Session(prefix, tuple(members), threshold, precision_bits, ring_bits)
    digest = store.resolve(session.name("sum"))
    if digest is not None:
        return sum_of(store, digest, session.what)
    check_input(session, mine, export, size)
    secrets = advertise(store, session, mine)
    share(store, session, secrets, deadline=deadline, backoff=backoff)
    masked_input(store, session, secrets, export, size, deadline=deadline, backoff=backoff)
    reveal(store, session, secrets, deadline=deadline, backoff=backoff)
    return unmask(store, session, deadline=deadline, backoff=backoff, lease=lease)
