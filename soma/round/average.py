"""The averaging: once every member is accounted for (or, past the deadline, the quorum
came), whoever gets the claim (soma.round.once) computes the strategy's step over exactly
the inputs the checks accepted, maybe as a tree of partial means (soma.round.tree), and
publishes its record. Under a quorum a client whose input is refused (soma.round.checks
`decide`, the same in every process) is left out, and the record says why; its claim and
its place are those of the accepted inputs, so every process meets at the one place. A run
that set `drop_unstarted` (its meeting's config) counts a missing client whose Slurm job
had not started, or had ended, at the deadline as dropped, saying where its job was
(soma.slurm.queue); without Slurm, or where the queue names no job of it, nothing changes.

Kept apart from what it waits on (the quorum module, the checks, the other meetings of the round),
which it calls through their modules (`quorum._enough(...)`, `verify.verify_average(...)`)
so that one patch there reaches it. An average this process did not compute is verified
before anyone leaves with it (soma.round.verify: recomputed, with a roster).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from soma.nodes import Export
from soma.round import checks, once, quorum, records, signed, tree, verify, waiting
from soma.round import signing as signatures
from soma.round.checks import Decision, decide
from soma.round.client import STORE_FAULT, Faults, noted_faults
from soma.round.conflicts import _Elsewhere
from soma.round.meeting import Input, Meeting
from soma.round.once import POLL, Backoff, Place, RoundIncomplete
from soma.round.quorum import _left_out_text, present
from soma.round.verified_values import VerifiedValues
from soma.slurm import query
from soma.slurm.queue import Queue
from soma.store import Store, codecs
from soma.strategies import Strategy, at_round, uniform


def inputs_key(meeting: str, inputs: Sequence[Input]) -> str:
    """The digest of what one averaging is made of: the meeting's key, and each client's part."""
    listed = [
        [i.client, i.weights, i.size, i.extra] for i in sorted(inputs, key=lambda i: i.client)
    ]
    return hashlib.sha256(codecs.canonical_json([meeting, listed])).hexdigest()


def _average(
    store: Store,
    meeting: Meeting,
    strategy: Strategy,
    inputs: list[Input],
    me: dict[str, Any],
    refused: Mapping[int, str],
    kept: VerifiedValues | None = None,
    *,
    waits: Waits,
    unstarted: Mapping[int, str] | None = None,
) -> str:
    """The strategy's arithmetic over the inputs, and the record that says what went in
    (and who was left out: `refused`, the clients whose inputs were refused, and why;
    `unstarted`, those whose Slurm jobs had not started at the deadline, and where they were).
    `kept`: the inputs' values the checks read and verified, folded without a second read;
    `waits`: how the averaging waits, its tree's nodes too."""
    kept = VerifiedValues(budget=0) if kept is None else kept
    previous = None if meeting.start is None else store.recall_digest(meeting.start, lazy=True)
    state = None if meeting.state is None else store.recall_digest(meeting.state)
    root = _tree_root(store, meeting, inputs, me, waits)
    strategy = at_round(strategy, round=meeting.round, seed=meeting.config.get("seed"))
    if root is None:
        weights, new_state = strategy.aggregate(
            previous, (kept.update(store, i) for i in inputs), state, clients=meeting.clients
        )
    else:
        mean = store.recall_digest(root.mean, lazy=True)
        weights, new_state = strategy.from_mean(previous, mean, state, clients=meeting.clients)
    record = records.average_record(
        meeting,
        left_out=_left_out(store, meeting, inputs, refused, unstarted or {}),
        inputs=[
            records.input_entry(i.client, i.weights, i.size, i.extra, i.record) for i in inputs
        ],
        weights=store.put_value(weights),
        state=None if new_state is None else store.put_value(new_state),
        averaged_by=me,
        tree=None
        if root is None
        else {"fan_in": meeting.tree, "mean": root.mean, "weight": root.weight},
    )
    signer = signed.averager(meeting)
    return signatures.put(store, meeting.signing, record.value(), name=meeting.average, by=signer)


def _left_out(
    store: Store,
    meeting: Meeting,
    inputs: Sequence[Input],
    refused: Mapping[int, str],
    unstarted: Mapping[int, str],
) -> dict[int, str]:
    """Why each member not among the inputs was left out: its input refused, its drop-out's
    reason, its store's fault (its fault note: it came, and its store failed it), or it came
    too late or never came (where its Slurm job was at the deadline, if `unstarted` says)."""
    came = {i.client for i in inputs}
    here = present(store, meeting)
    # only the others' records say why they are not among the inputs (one read, not two)
    dropped = quorum.roll_call(store, meeting, [k for k in here if k not in came])[1]
    late = "came after the round was averaged"
    # a client that never wrote its record but left a fault note came: its store failed it
    faults = noted_faults(store, meeting, [k for k in meeting.members if k not in here])
    return {
        k: records.refused(refused[k])
        if k in refused
        else dropped.get(k)
        or (
            late
            if k in here
            else STORE_FAULT + faults[k]
            if k in faults
            else unstarted.get(k, records.NEVER_CAME)
        )
        for k in meeting.members
        if k not in came
    }


@dataclass(frozen=True)
class Ready:
    """A round's inputs once they are there, and the clients whose records could not be
    taken, and why: what the checks decide on (compared between polls, so plain values)."""

    came: tuple[Input, ...]
    unreadable: tuple[tuple[int, str], ...] = ()
    unstarted: tuple[tuple[int, str], ...] = ()  # missing, their Slurm jobs not started: why


@dataclass(frozen=True)
class Waits:
    """How one averaging waits (its `once`'s deadline, lease, polling and sleep), handed
    whole to its tree's nodes: a run's timing reaches them as it reaches the averaging."""

    deadline: float | None
    lease: float
    backoff: Backoff
    sleep: Callable[[float], None] = time.sleep


def _tree_root(
    store: Store, meeting: Meeting, inputs: Sequence[Input], me: dict[str, Any], waits: Waits
) -> tree.Node | None:
    if not verify.uses_tree(meeting, len(inputs)):
        return None
    place = meeting.averaging(inputs_key(meeting.key, inputs))
    leaves = tree.leaves_of(inputs, uniform=uniform(meeting.strategy_object()))
    return tree.reduce(
        store, place, leaves, meeting.tree, me=me, deadline=waits.deadline, lease=waits.lease,
        backoff=waits.backoff, sleep=waits.sleep, signing=meeting.signing,
    )  # fmt: skip


class _Averaging:
    """One round's averaging as `soma.round.once` asks about it: what `ready` hands it is
    checked once (`check`: the clients whose inputs are refused decided, alike in every
    process), and its place, its tree and its average are those of the accepted inputs."""

    def __init__(
        self,
        store: Store,
        meeting: Meeting,
        ready: Callable[[bool], Ready | None],
        missing: Callable[[], tuple[list[int], str]],
        *,
        late: bool,
        waits: Waits,
        sites: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        self.store, self.meeting, self.what = store, meeting, meeting.what
        self.ready, self.missing, self.late = ready, missing, late
        self.waits = waits  # its once's, for its tree's nodes
        self.sites = sites  # which clients each site hosts: where a waiting line says they are
        self.strategy = meeting.strategy_object()
        self._decided: tuple[Ready, Decision] | None = None
        self.kept = VerifiedValues()  # the inputs' values `check` read and verified, for `compute`
        self.computed: str | None = None  # the average this process computed, if it did

    def checked(self, digest: str) -> str:
        """The average `digest` once it is believed: this process's own computation is
        checked signed; another's is verified (soma.round.verify) before anyone uses it."""
        if digest == self.computed:
            signed.check_average(self.store, self.meeting, digest)
        else:
            verify.verify_average(self.store, self.meeting, digest)
        return digest

    def done(self) -> str | None:
        # whoever arrives late leaves with the meeting's average, whatever it was made of
        return self.store.resolve(self.meeting.average) if self.late else None

    def awaited(self) -> str:
        """The clients a waiting process waits for, where they are (soma.round.waiting)."""
        never, detail = self.missing()
        return f"{waiting.clients(never, self.sites)}{detail}"

    def check(self, inputs: Ready) -> None:
        self._decided = (inputs, self._decide(inputs))

    def _decide(self, inputs: Ready) -> Decision:
        unreadable = dict(inputs.unreadable)
        decision = decide(
            self.store, self.meeting, self.strategy, list(inputs.came), unreadable, kept=self.kept
        )
        signed.averager(self.meeting)  # a roster member's key to sign the average with, or refused
        return decision

    def decision(self, inputs: Ready) -> Decision:
        """What `check` decided on these inputs (decided again if it was on others)."""
        if self._decided is None or self._decided[0] != inputs:
            self.check(inputs)
        assert self._decided is not None
        return self._decided[1]

    def place(self, inputs: Ready) -> Place:
        accepted = self.decision(inputs).accepted
        return Place(self.meeting.averaging(inputs_key(self.meeting.key, accepted)))

    def share(self, inputs: Ready, me: dict[str, Any]) -> None:
        """Work any process may do before the claim: the tree's nodes, spread among all."""
        _tree_root(self.store, self.meeting, self.decision(inputs).accepted, me, self.waits)

    def compute(self, inputs: Ready, me: dict[str, Any]) -> str:
        decided = self.decision(inputs)
        self.computed = _average(
            self.store, self.meeting, self.strategy, decided.accepted, me, decided.refused,
            self.kept, waits=self.waits, unstarted=dict(inputs.unstarted),
        )  # fmt: skip
        return self.computed

    def settle(self, published: str) -> str:
        """The first averaging published becomes the meeting's average (claimed: once)."""
        if self.store.resolve(self.meeting.average) is None:
            once.publish(self.store, self.meeting.average, published)
        return self.store.resolve(self.meeting.average) if self.late else published


def average_round(
    store: Store,
    meeting: Meeting,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
    sleep: Callable[[float], None] = time.sleep,
    lease: float,
    site: str | None = None,
    sites: Mapping[str, Sequence[int]] | None = None,
) -> str:
    """Make sure the meeting has an average; the digest of its record.

    Waits for every member to come or drop out; then whoever gets the claim averages and
    publishes, and everyone else waits for what was published. A holder that is provably gone
    (its Slurm job ended, or on this host its process is gone) is taken over; one that may be
    alive is waited for. `deadline` is seconds of waiting (None: forever). Going on without
    somebody is the meeting's policy, its quorum: past the deadline the round is averaged over
    whoever came if they are at least the quorum; below it, a RoundIncomplete names the
    clients that never came. A missing client's fault note (its store failed it) stops the
    round, and holds it past the deadline until it does (soma.round.client.Faults): a quorum is
    never averaged around it. Under a quorum, a client whose record or input is refused is
    left out as well (named in the record, `input refused: ...`); where all must come, the
    refusal stops the round in every process, naming the client and its record. An
    AveragerDied names who claimed the averaging and never published. On a bucket (a store
    with compare-and-swap) a holder is judged by its lease of `lease` seconds instead
    (soma.round.lease). While it waits it says so (soma.round.waiting): `sites` (site -> its
    clients) says where the missing clients are, and `site` is this process's, in its holder
    record (and the average's `averaged_by`, if it averages). Where the run set
    `drop_unstarted`, past the deadline a missing client whose Slurm job is PENDING or has
    ended is counted as dropped (`_unstarted`): named so in the record, and in the
    RoundIncomplete when the quorum did not come.
    """

    elsewhere = _Elsewhere(store, meeting)
    queue = Queue(query.queue)  # asked afresh at the deadline, then at most once a minute
    unstarted: dict[int, str] = {}  # what the queue said past the deadline, for `missing`
    faults = Faults(store, meeting)
    delays = backoff.delays()  # while a fault note stands past the deadline (`ready`)

    def ready(past: bool) -> Ready | None:
        """Everyone accounted for; or, past the deadline, at least the quorum came. A client
        waited for that joined another meeting of the round is said at once (MeetingsDiffer).
        A record that cannot be taken stops the round where all must come; under a quorum it
        is its client's input refused (decided in `check`, with the others')."""
        here = present(store, meeting)
        accounted = quorum._complete(here, len(meeting.members))
        if not accounted:
            missing = [k for k in meeting.members if k not in here]
            elsewhere.check(missing)
            standing = faults.check(missing)
            while past and standing:  # never averaged around a client whose store failed:
                sleep(next(delays))  # its note stops this process once it has stood the grace
                here = present(store, meeting)
                standing = faults.check([k for k in meeting.members if k not in here])
            accounted = quorum._complete(here, len(meeting.members))
        if not (accounted or past):
            return None
        came, dropped, unreadable = quorum.roll_call(store, meeting, here)
        if unreadable and not checks.leaves_refused_out(meeting):
            raise unreadable[min(unreadable)]  # all must come: a record refused stops the round
        refused = {k: checks.reason(meeting, k, e) for k, e in sorted(unreadable.items())}
        unstarted.clear()
        unstarted.update(_unstarted(meeting, here, queue) if past else {})
        if quorum._enough(came, meeting.needed):
            return Ready(tuple(came), tuple(refused.items()), tuple(unstarted.items()))
        accounted = accounted or len(here) + len(unstarted) == len(meeting.members)
        if accounted and (dropped or refused or unstarted):  # nobody else is coming: say so
            left = {**dropped, **unstarted}
            left |= {k: records.refused(why) for k, why in refused.items()}
            raise RoundIncomplete(
                f"{meeting.what}: {len(came)} of {len(meeting.members)} clients came, fewer than "
                f"the quorum of {meeting.needed}: {_left_out_text(left)}",
                sorted(left),
            )
        return None

    def missing() -> tuple[list[int], str]:
        here = present(store, meeting)
        came, dropped, unreadable = quorum.roll_call(store, meeting, here)
        refused = {k: records.refused(checks.reason(meeting, k, e)) for k, e in unreadable.items()}
        never = [k for k in meeting.members if k not in here]
        left = {**dropped, **{k: why for k, why in unstarted.items() if k in never}, **refused}
        detail = f" (quorum {meeting.needed} of {len(meeting.members)}, {len(came)} came"
        detail += f"; {_left_out_text(left)})" if left else ")"
        return never, detail

    waits = Waits(deadline, lease, backoff, sleep)
    work = _Averaging(store, meeting, ready, missing, late=True, waits=waits, sites=sites)
    digest = once.once(
        store, work, deadline=waits.deadline, backoff=waits.backoff, sleep=waits.sleep,
        lease=waits.lease, signing=meeting.signing, site=site,
    )  # fmt: skip
    return work.checked(digest)


DROP_UNSTARTED = "drop_unstarted"  # the run's setting, in its meetings' config when set


def _unstarted(meeting: Meeting, here: Sequence[int], queue: Queue) -> dict[int, str]:
    """The missing members whose Slurm jobs have not started, or have ended, as the queue
    says now (soma.slurm.queue `not_started`), each with its left-out reason; {} unless the
    run set `drop_unstarted`. A client whose job runs is not among them, nor one the queue
    names no job of (absence proves nothing), nor any where this process asks no queue."""
    if not meeting.config.get(DROP_UNSTARTED):
        return {}
    missing = [k for k in meeting.members if k not in here]
    return {k: records.not_started(said) for k, said in queue.not_started(missing).items()}


def average_inputs(
    store: Store,
    meeting: Meeting,
    inputs: Sequence[Input],
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
    lease: float,
) -> str:
    """Average exactly these clients' weights, once; the record's digest.

    What the workflow's averaging job calls: its inputs are what its client jobs reported;
    under a quorum one that is refused is left out, as in `average_round`.
    A second job with the same inputs (a retry, another snakemake sharing the store) finds
    the claim taken and waits for, then reuses, the published average.
    """
    inputs = sorted(inputs, key=lambda i: i.client)
    for i in inputs:
        meeting.check_client(i.client)
    given = Ready(tuple(inputs))
    waits = Waits(deadline, lease, backoff)
    work = _Averaging(store, meeting, lambda past: given, lambda: ([], ""), late=False, waits=waits)
    digest = once.once(
        store, work, deadline=waits.deadline, backoff=waits.backoff, lease=waits.lease,
        signing=meeting.signing,
    )  # fmt: skip
    return work.checked(digest)


def weights_of_average(store: Store, digest: str) -> Export:
    """The mean weights an average record (by digest) names."""
    return store.recall_digest(records.read_average(store, digest).weights)
