"""Every store name of a run, built and parsed in one place.

A run's rounds are kept under names a reader finds by prefix (`Store.bound`), so every
module that writes one and every module that reads one back (status, model export, reach,
advice, rebuild) must spell it alike; here is the one spelling:

    <run>/start                                    the workflow's starting weights
    <run>/charter                                  a signed run's charter: its random value,
                                                   in every signature (soma.round.signing)
    <run>/starts/<weights>                         weights a run starts from, named from the
                                                   moment they are made (every mode)
    <run>/evaluation/<weights>                     the workflow's metrics of those weights
    <run>/round/<r>/<meeting>/about                the meeting's identity (claimed once)
    <run>/round/<r>/<meeting>/client/<k>           what client k brought (or why it dropped)
    <run>/round/<r>/<meeting>/started/<k>          a workflow train job's "I started"
    <run>/round/<r>/<meeting>/release/<k>          client k's distributed-DP release: its
                                                   record, claimed once (soma.round.client)
    <run>/round/<r>/<meeting>/trained/<k>          client k's training metrics, in stores written
                                                   before issue 50 (now in its record: read
                                                   only, soma.run.evaluation.training_of)
    <run>/round/<r>/<meeting>/evaluated/<k>        client k's metrics of the average on its own
                                                   held-out data (soma.run.evaluation)
    <run>/round/<r>/<meeting>/federated            the round's metrics over clients (mean, spread)
    <run>/round/<r>/<meeting>/apart/<other>        a note from meeting <other> of the round,
                                                   which found a client of this one (soma.round)
    <run>/round/<r>/<meeting>/inputs/<key>         one averaging of exactly these inputs (a place)
    <run>/round/<r>/<meeting>/average              the meeting's average (claimed: the first one)
    <run>/round/<r>/<meeting>/secagg/...           a secure round's session (soma.secagg)
    <place>/claimed, takeover/<g>, computed/<who>, published    once-only work (soma.round.once)
    <place>/lease                                  its holder's lease, on a store with
                                                   compare-and-swap (soma.round.lease)
    <place>/tree/<level>/<index>                   a node of a tree of means (soma.round.tree)
    <run>/async/version/<v>                        the place of an asynchronous run's version v
                                                   (soma.asynchronous): its `published` is the
                                                   version's record
    <run>/async/update/<from>/<k>                  client k's update trained from version
                                                   <from> (claimed: one per client and version)

Above FAN_OUT clients a meeting files client records and started markers by thousands
(`client/<k // 1000>/<k>`), so that no folder holds more than a thousand names. A run's
name never has a `round` segment (soma.store.names.check_run_name), so the first `round/<r>/`
in a name ends the run's name. Names here must never change: stores written before keep
being read by them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The most client records (and started markers) one folder of a meeting holds.
FAN_OUT = 1000

_KEY = r"[0-9a-f]{64}"
# A name inside a round's meeting: <run>/round/<r>/<meeting key>/<rest>.
ROUND_NAME = re.compile(rf"^(?P<run>.+?)/round/(?P<round>\d+)/(?P<meeting>{_KEY})/(?P<rest>.+)$")
_MEMBER = re.compile(
    r"^(?P<kind>client|started|release|trained|evaluated)/(?:(?P<group>\d+)/)?(?P<k>\d+)$"
)
_PUBLISHED = re.compile(rf"^inputs/(?P<key>{_KEY})/published$")
_HOLDER = re.compile(rf"^inputs/(?P<key>{_KEY})/(claimed|computed/\w+|takeover/\d+)$")


# --- a run's names ----------------------------------------------------------------------------


def start(run: str) -> str:
    """The weights the workflow's run starts from."""
    return f"{run}/start"


def starting(run: str, weights: str) -> str:
    """Weights `weights` that `run` starts from, claimed the moment they are made, in every
    mode (`soma client`, `soma simulate`, the workflow's start job): reachable while round 0
    trains, so no grace protects them; one name per digest, so runs of one name that start
    elsewhere (another seed) never unbind each other's."""
    return f"{run}/starts/{weights}"


def charter(run: str) -> str:
    """The run's charter (soma.round.signing): a random value fixed when a signed run first
    writes, bound into every signature of the run, so a record copied into another store's
    run (or another run) does not verify there."""
    return f"{run}/charter"


def run_names(run: str) -> str:
    """The prefix of every name of `run` (and of runs whose name extends it: see run_of)."""
    return f"{run}/"


def evaluation(run: str, weights: str) -> str:
    """Where the workflow keeps the metrics of weights `weights`."""
    return f"{run}/evaluation/{weights}"


def rounds(run: str) -> str:
    """The prefix under which every round of `run` is kept."""
    return f"{run}/round/"


def round_prefix(run: str, round: int) -> str:
    return f"{run}/round/{round}"


def meeting(run: str, round: int, key: str) -> str:
    """Where one meeting of a round (keyed by its identity, soma.round.Meeting) is kept."""
    return f"{round_prefix(run, round)}/{key}"


# --- a meeting's names ------------------------------------------------------------------------


def about(meeting: str) -> str:
    return f"{meeting}/about"


def average(meeting: str) -> str:
    return f"{meeting}/average"


def clients(meeting: str) -> str:
    """The prefix of the meeting's client records."""
    return f"{meeting}/client/"


def started_markers(meeting: str) -> str:
    """The prefix of the meeting's started markers."""
    return f"{meeting}/started/"


def notes(meeting: str) -> str:
    """The prefix of the notes other meetings of the round left this one (soma.round)."""
    return f"{meeting}/apart/"


def note(meeting: str, other: str) -> str:
    """The note meeting `other` (its key) left `meeting`: it found a client of it."""
    return f"{notes(meeting)}{other}"


def _member(meeting: str, kind: str, k: int, clients: int) -> str:
    if clients > FAN_OUT:
        return f"{meeting}/{kind}/{k // FAN_OUT}/{k}"
    return f"{meeting}/{kind}/{k}"


def client(meeting: str, k: int, clients: int) -> str:
    """Client k's record in a meeting of `clients` clients (fanned out above FAN_OUT)."""
    return _member(meeting, "client", k, clients)


def started(meeting: str, k: int, clients: int) -> str:
    """A workflow train job's marker for client k: beside its record, fanned out alike."""
    return _member(meeting, "started", k, clients)


def fault(meeting: str, k: int, clients: int) -> str:
    """Client k's note that the store failed its part (soma.run.step): fanned out as its
    record, so that its peers stop at once instead of averaging around a broken store."""
    return _member(meeting, "fault", k, clients)


def release(meeting: str, k: int, clients: int) -> str:
    """Client k's distributed-DP release in a meeting (soma.round.client): claimed once, with
    the record of the one noisy release of its update; fanned out as its record."""
    return _member(meeting, "release", k, clients)


def releases(meeting: str) -> str:
    """The prefix of a meeting's distributed-DP releases (`release/<k>`)."""
    return f"{meeting}/release/"


def faults(meeting: str) -> str:
    """The prefix of the meeting's fault notes."""
    return f"{meeting}/fault/"


def started_spellings(meeting: str, k: int) -> list[str]:
    """Where client k's started marker may be when the meeting's client count is unknown:
    client 1000 and above exist only in a fanned-out meeting; below, either."""
    if k >= FAN_OUT:
        return [started(meeting, k, FAN_OUT + 1)]
    return [started(meeting, k, 1), started(meeting, k, FAN_OUT + 1)]


def trained(meeting: str, k: int, clients: int) -> str:
    """Client k's training metrics in a meeting of a store written before issue 50, fanned out
    as its record (now kept in that record: soma.run.evaluation.training_of reads both)."""
    return _member(meeting, "trained", k, clients)


def evaluated(meeting: str, k: int, clients: int) -> str:
    """Client k's metrics of the meeting's average on its own held-out data
    (soma.run.evaluation)."""
    return _member(meeting, "evaluated", k, clients)


def evaluations(meeting: str) -> str:
    """The prefix of the meeting's per-client evaluations."""
    return f"{meeting}/evaluated/"


def federated(meeting: str) -> str:
    """The meeting's per-round metrics over clients: evaluation and training
    (soma.run.evaluation)."""
    return f"{meeting}/federated"


def inputs(meeting: str) -> str:
    """The prefix of the meeting's averagings (one place per set of inputs)."""
    return f"{meeting}/inputs/"


def averaging(meeting: str, key: str) -> str:
    """The place of one averaging: the meeting's, of the inputs whose digest is `key`."""
    return f"{meeting}/inputs/{key}"


def secagg(meeting: str) -> str:
    """A secure round's session prefix (soma.secagg.round, soma.secagg)."""
    return f"{meeting}/secagg"


def session(prefix: str, *parts: object) -> str:
    """A name of a secure sum's session: `about`, `sum`, `<phase>/<k>`, `roster/<phase>`..."""
    return "/".join([prefix, *(str(p) for p in parts)])


# --- a place's names (soma.round.once, soma.round.tree) -------------------------------------------


def claimed(place: str) -> str:
    return f"{place}/claimed"


def takeovers(place: str) -> str:
    """The prefix of a place's takeovers (`takeover/<generation>`)."""
    return f"{place}/takeover/"


def computed(place: str) -> str:
    """The prefix of a place's audit of computations (`computed/<who>`)."""
    return f"{place}/computed/"


def takeover(place: str, generation: object) -> str:
    """The `generation`-th takeover of a place's work (1, 2, ...)."""
    return f"{takeovers(place)}{generation}"


def computed_by(place: str, who: str) -> str:
    """The audit name of one computation at a place, by the digest of its holder record."""
    return f"{computed(place)}{who[:16]}"


def published(place: str) -> str:
    return f"{place}/published"


def lease(place: str) -> str:
    """The lease of a place's holder, swapped by compare-and-swap (soma.round.lease)."""
    return f"{place}/lease"


def tree_node(place: str, level: int, index: int) -> str:
    """The place of node `index` of level `level` of an averaging's tree."""
    return f"{place}/tree/{level}/{index}"


# --- an asynchronous run's names (soma.asynchronous) -------------------------------------------


def versions(run: str) -> str:
    """The prefix of an asynchronous run's versions (each a place: soma.round.once)."""
    return f"{run}/async/version/"


def version(run: str, v: int) -> str:
    """The place of version `v` of an asynchronous run: claimed, taken over, published once."""
    return f"{versions(run)}{v}"


def version_of(name: str, run: str) -> int | None:
    """The version whose published record `name` is, or None for any other name."""
    rest = name[len(versions(run)) :].split("/")
    ok = name.startswith(versions(run)) and len(rest) == 2 and rest[1] == "published"
    return int(rest[0]) if ok and rest[0].isdigit() else None


def updates(run: str) -> str:
    """The prefix of an asynchronous run's client updates."""
    return f"{run}/async/update/"


def update(run: str, start: int, k: int) -> str:
    """Client k's update trained from version `start` (claimed: one per client and version)."""
    return f"{updates(run)}{start}/{k}"


def update_of(name: str, run: str) -> tuple[int, int] | None:
    """(the version it started from, the client) of an update's name, or None."""
    rest = name[len(updates(run)) :].split("/")
    ok = name.startswith(updates(run)) and len(rest) == 2 and all(p.isdigit() for p in rest)
    return (int(rest[0]), int(rest[1])) if ok else None


# --- parsing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundName:
    """A name inside a round's meeting, taken apart: `<run>/round/<r>/<meeting>/<rest>`."""

    run: str
    round: int
    meeting: str  # the meeting's key
    rest: str

    @property
    def prefix(self) -> str:
        return meeting(self.run, self.round, self.meeting)

    @property
    def client(self) -> int | None:
        """The client whose record this is (`client/<k>`, fanned out or not), or None."""
        return client_of(self.rest)

    @property
    def started(self) -> int | None:
        """The client whose started marker this is, or None."""
        return started_of(self.rest)

    @property
    def published(self) -> str | None:
        """The averaging's key when this is a published average (`inputs/<key>/published`);
        "" for the meeting's `average`; None otherwise."""
        if self.rest == "average":
            return ""
        m = _PUBLISHED.match(self.rest)
        return m["key"] if m else None

    @property
    def holder(self) -> str | None:
        """The averaging's key when this is a holder's record of it (claimed, computed,
        takeover), or None."""
        m = _HOLDER.match(self.rest)
        return m["key"] if m else None


def _member_of(rest: str, kind: str) -> int | None:
    m = _MEMBER.match(rest)
    if not m or m["kind"] != kind:
        return None
    k = int(m["k"])
    if m["group"] is not None and int(m["group"]) != k // FAN_OUT:
        return None
    return k


def parse(name: str) -> RoundName | None:
    """A name inside a round's meeting taken apart, or None for any other name."""
    m = ROUND_NAME.match(name)
    if not m:
        return None
    return RoundName(m["run"], int(m["round"]), m["meeting"], m["rest"])


def run_of(name: str) -> str | None:
    """The run a name belongs to: its part before the first `/round/<r>/`, or before a
    final `/start` or `/charter`, an `/evaluation/<weights>` or a `/starts/<weights>`; None
    for a name of no run."""
    parts = name.split("/")
    for i in range(1, len(parts) - 1):
        if parts[i] == "round" and parts[i + 1].isdigit():
            return "/".join(parts[:i])
        if parts[i] == "async" and parts[i + 1] in ("version", "update"):
            return "/".join(parts[:i])
    if len(parts) > 1 and parts[-1] in ("start", "charter"):
        return "/".join(parts[:-1])
    if len(parts) > 2 and parts[-2] in ("evaluation", "starts"):
        return "/".join(parts[:-2])
    return None


def runs(names: list[str]) -> list[str]:
    """The runs with rounds among `names`."""
    found = set()
    for name in names:
        parts = name.split("/")
        for i in range(1, len(parts) - 1):
            if parts[i] == "round" and parts[i + 1].isdigit():
                found.add("/".join(parts[:i]))
                break
    return sorted(found)


def meetings(names: list[str], run: str) -> list[tuple[int, str]]:
    """Every (round, meeting key) of `run` among `names` (those under `rounds(run)`)."""
    prefix = rounds(run)
    found = set()
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].split("/")
        if len(parts) >= 3 and parts[0].isdigit():
            found.add((int(parts[0]), parts[1]))
    return sorted(found)


def strays(names: list[str], run: str) -> list[str]:
    """The names under `rounds(run)` that are no meeting's (`<r>/<meeting>/<rest>`): a name
    where a round's or a meeting's folder belongs (a planted link is listed as a name), which
    a reader must say it cannot read, never skip."""
    prefix = rounds(run)
    out = []
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].split("/")
        if not (len(parts) >= 3 and parts[0].isdigit()):
            out.append(name)
    return out


def round_of(name: str, run: str) -> int | None:
    """The round a name under `rounds(run)` is in, or None when it names none."""
    first = name[len(rounds(run)) :].split("/")[0]
    return int(first) if name.startswith(rounds(run)) and first.isdigit() else None


def under(name: str, prefix: str) -> str:
    """The first segment of `name` after `prefix` (an averaging's key under `inputs(...)`)."""
    return name[len(prefix) :].split("/")[0]


def client_of(rest: str) -> int | None:
    """The client of a client record's name inside its meeting (`client/<k>`, fanned out or
    not: `client/<k // 1000>/<k>`), or None for any other."""
    return _member_of(rest, "client")


def release_of(rest: str) -> int | None:
    """The client of a distributed-DP release's name inside its meeting (`release/<k>`,
    fanned out or not), or None for any other."""
    return _member_of(rest, "release")


def started_of(rest: str) -> int | None:
    """The client of a started marker's name inside its meeting, or None for any other."""
    return _member_of(rest, "started")
