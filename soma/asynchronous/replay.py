"""An asynchronous run replayed from its records alone, bit for bit, whatever order its
updates arrived in: every version's weights recomputed from the weights it stepped from and
the updates its record names (the one step, soma.asynchronous.versions.step_of), and every
promise its record makes checked: it follows the version before, consumes exactly `buffer`
updates no earlier version consumed, each the update its name holds, trained from the
version its record says (that version's record, as the client read it), with the staleness
and weight the settings give. Read-only: `soma audit` runs it (soma.audit.asynchronous).

With the run's roster (`signing`) it checks every signature too (soma.asynchronous.signed):
each version's by an averager, each consumed update's by its client, and each update a
version refused as forged indeed not its client's. A damaged blob of a consumed update (or a
record that cannot be read) is said per version and client, with what can fix it: nothing
rebuilds a client's update (`soma repair` rebuilds averages, and a client trains only from
the latest version), so its blob is restored from a backup. Each problem is an `Issue`
naming its check and its client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from soma.arithmetic import recomputed_under
from soma.asynchronous import arithmetic, signed
from soma.asynchronous.versions import Versions, step_of
from soma.config.asynchronous import AsynchronousRefused, buffered
from soma.errors import SomaError
from soma.round import layout
from soma.round.once import read_record
from soma.round.signing import Signing, SigningError
from soma.store import Store, codecs
from soma.store.errors import CorruptBlob, StoreUnavailable
from soma.store.values import value_digest


class Issue(str):
    """One promise of a version that does not hold, as a line (a str: whoever reads lines
    reads it so), with which check it is (replay, signature, blobs) and the client whose
    update it concerns (None: the version's own)."""

    client: int | None
    check: str

    def __new__(cls, text: str, client: int | None = None, check: str = "replay") -> Issue:
        made = super().__new__(cls, text)
        made.client, made.check = client, check
        return made


@dataclass
class Replayed:
    """One version replayed: its record, and what did not hold (empty: it holds, bit for bit)."""

    version: int
    record: str
    value: dict[str, Any]
    problems: list[Issue] = field(default_factory=list)
    signer: int | None = None  # the averager whose signature holds on it (a signed run's)


def replay(store: Store, run: str, signing: Signing | None = None) -> list[Replayed]:
    """Every published version of `run`, checked and recomputed (see the module); with
    `signing`, the run's roster, every signature checked too."""
    first = store.resolve(layout.published(layout.version(run, 0)))
    if first is None:
        return []
    start = read_record(store, first)
    issues, signer = _signer(store, signing, run, 0, first, start)
    try:
        settings = buffered(start.get("settings"), "version 0's settings")
    except AsynchronousRefused as error:
        return [Replayed(0, first, start, [*issues, Issue(str(error))], signer)]
    versions = Versions(store, run, settings)
    out = [Replayed(0, first, start, issues, signer)]
    seen: dict[str, int] = {}
    last = 0  # names only: a version whose record is damaged is said in its turn
    while store.resolve(layout.published(layout.version(run, last + 1))) is not None:
        last += 1
    for v in range(1, last + 1):
        try:
            found = versions.record(v)
        except SomaError as error:  # its record's blob damaged: said, and nothing after it
            said = f"its record cannot be read: {_what(error)}; restore it from a backup"
            out.append(Replayed(v, "", {}, [Issue(said, check="blobs")]))
            break
        if found is None:
            out.append(Replayed(v, "", {}, [Issue(f"version {v} is missing below the latest")]))
            break
        done = Replayed(v, *found)
        done.problems, done.signer = _signer(store, signing, run, v, *found)
        done.problems += _signatures(store, signing, run, v, found[1])
        done.problems += _problems(versions, v, found[1], out[-1].record, seen)
        out.append(done)
    return out


def _signer(
    store: Store, signing: Signing | None, run: str, v: int, digest: str, record: dict[str, Any]
) -> tuple[list[Issue], int | None]:
    """Version v's record signed by an averager of the roster (and version 0's naming it):
    what does not hold, and who signed it."""
    if signing is None:
        return [], None
    issues, signer = [], None
    if v == 0 and record.get("roster") != signing.digest:
        issues.append(
            Issue(
                f"version 0 says roster {str(record.get('roster'))[:12]}, and the roster "
                f"checked against is {signing.digest[:12]}",
                check="signature",
            )
        )
    try:
        signer = signed.check_signer(store, signing, run, v, digest)
    except SomaError as error:
        consumed = [e.get("client") for e in record.get("consumed") or [] if isinstance(e, dict)]
        took = f"; it says it consumed the updates of clients {consumed}" if consumed else ""
        issues.append(Issue(f"{_said(error)}{took}", _signer_of(error), "signature"))
    return issues, signer


def _signatures(
    store: Store, signing: Signing | None, run: str, v: int, record: dict[str, Any]
) -> list[Issue]:
    """Each update version v consumed signed by its client (soma.asynchronous.signed), and
    each it refused as forged indeed not (else the version left a client's update out). A
    record that cannot be read is the replay's to say (`damaged`), not said twice."""
    issues = []
    for entry in record.get("consumed") or []:
        k = entry.get("client") if isinstance(entry, dict) else None
        try:
            signed.check_consumed(store, signing, run, v, entry if isinstance(entry, dict) else {})
        except SigningError as error:
            issues.append(Issue(_said(error), k if isinstance(k, int) else None, "signature"))
        except StoreUnavailable:
            raise
        except SomaError:
            continue
    for entry in record.get("refused") or []:
        if isinstance(entry, dict) and entry.get(signed.FORGED):
            issues += _forged(store, signing, v, entry)
    return issues


def _forged(store: Store, signing: Signing | None, v: int, entry: dict[str, Any]) -> list[Issue]:
    """An update version v refused as forged: its signature must indeed not hold."""
    name, k, record = str(entry.get("update")), entry.get("client"), entry.get("record")
    client = k if isinstance(k, int) else None
    said = f"version {v} refused client {k}'s update {name!r} as forged"
    if signing is None:
        return [
            Issue(
                f"{said}, and it is checked without a roster (--roster FILE)", client, "signature"
            )
        ]
    if client is None or not isinstance(record, str):
        return [Issue(f"{said}, naming no client or record", client, "signature")]
    if signed.forged(store, signing, record, name=name, client=client) is None:
        return [
            Issue(
                f"{said}, and it is signed by client {k}: the version left it out", client,
                "signature",
            )
        ]  # fmt: skip
    return []


def _signer_of(error: SomaError) -> int | None:
    """The client a signature refusal names as the signer, if any."""
    words = str(error).split("signed by client ", 1)
    number = words[1].split(" ", 1)[0].rstrip(",'") if len(words) == 2 else ""
    return int(number) if number.isdigit() else None


def _said(error: BaseException) -> str:
    """An error's words on one line (an issue is one line of the report)."""
    if isinstance(error, StoreUnavailable):
        raise error  # the store did not answer: nothing is said about the run
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _problems(
    versions: Versions,
    v: int,
    record: dict[str, Any],
    before: str,
    seen: dict[str, int],
) -> list[Issue]:
    settings, store = versions.settings, versions.store
    problems: list[Issue] = []
    if record.get("from") != before:
        problems.append(
            Issue(f"it says it follows record {record.get('from')}, not version {v - 1}'s")
        )
    if record.get("settings") != settings.value():
        problems.append(Issue(f"its settings {record.get('settings')} are not the run's"))
    consumed, refused = record.get("consumed") or [], record.get("refused") or []
    if len(consumed) != settings.buffer:
        problems.append(
            Issue(f"it consumes {len(consumed)} updates, not the buffer's {settings.buffer}")
        )
    for entry in consumed + refused:
        name, client = entry.get("update"), entry.get("client")
        k = client if isinstance(client, int) else None
        if name in seen:
            problems.append(
                Issue(f"update {name!r} was already consumed by version {seen[name]}", k)
            )
        seen[name] = v
        try:
            found = _entry_problems(versions, v, entry, refused=entry in refused)
        except SomaError as error:
            found = [Issue(damaged(error, v, entry), check="blobs")]
        problems += [Issue(text, k, text.check) for text in found]
    if problems:
        return problems
    try:
        recomputed = step_of(
            versions.weights(v - 1),
            consumed,
            v - 1,
            store.recall_digest,
            versions.weights,
            settings.server_lr,
        )
    except SomaError as error:
        said = (
            f"it cannot be recomputed: {_what(error)}; nothing rebuilds a version's weights "
            "but this replay, from the versions before: restore the blob from a backup"
        )
        return [Issue(said, check="blobs")]
    digest = value_digest(recomputed)
    if digest != record.get("weights"):
        problems.append(
            Issue(
                f"its weights {record.get('weights')} recompute to {digest} ({recomputed_under()})"
            )
        )
    return problems


def damaged(error: SomaError, v: int, entry: dict[str, Any]) -> str:
    """A consumed or refused update of version v that cannot be read, said with what fixes
    it: nothing in soma rebuilds a client's update, so the advice is the blob's backup."""
    name, k, start = entry.get("update"), entry.get("client"), entry.get("from")
    return (
        f"client {k}'s update {name!r} (trained from version {start}): {_what(error)}; nothing "
        "rebuilds a client's update (`soma repair` rebuilds averages, and a client trains only "
        f"from the latest version): restore the blob from a backup of the store; until then "
        f"version {v} cannot be replayed, nor any after it"
    )


def _what(error: SomaError) -> str:
    """A store's refusal of a blob, less its advice (`soma repair` rebuilds no version)."""
    if isinstance(error, CorruptBlob):
        return (
            f"blob {error.path} is corrupt (its bytes hash to {error.actual}, not "
            f"{error.expected}: changed after it was written)"
        )
    return _said(error).split(". Run `soma repair", 1)[0]


def sound(store: Store, digest: str) -> None:
    """Every blob value `digest` is made of read whole and hashed (a lazily mapped tensor is
    not hashed as it is read): the store's own refusal names a damaged or missing one."""
    tree, loose = codecs.parse_record(store.get(digest), digest)
    for blob in [*codecs.references(tree), *([] if loose is None else [loose])]:
        store.get(blob)


def _entry_problems(
    versions: Versions, v: int, entry: dict[str, Any], *, refused: bool
) -> list[Issue]:
    """What one consumed or refused entry breaks of the replay's promises (raising the
    store's refusal for a blob that cannot be read: `damaged`); its signatures are
    `_signatures`'."""
    settings, store, name = versions.settings, versions.store, entry.get("update")
    parsed = layout.update_of(str(name), versions.run)
    if parsed is None:
        return [Issue(f"{name!r} is not an update of run {versions.run!r}")]
    if store.resolve(name) != entry.get("record"):
        return [
            Issue(
                f"update {name!r} holds {store.resolve(name)}, not the record {entry.get('record')}"
            )
        ]
    start, client = parsed
    staleness = v - 1 - start
    problems = []
    said = {k: entry.get(k) for k in ("client", "from", "staleness")}
    if said != {"client": client, "from": start, "staleness": staleness}:
        problems.append(
            Issue(f"update {name!r}: its entry says {said}, its name client {client} from {start}")
        )
    if refused and entry.get(signed.FORGED):
        return problems  # refused whatever its staleness: `_signatures` checks it was forged
    update = read_record(store, entry["record"])
    base = versions.record(start)
    if base is None or update.get("base") != base[0]:
        problems.append(
            Issue(
                f"update {name!r} was trained from record {update.get('base')}, not version "
                f"{start}'s as published ({None if base is None else base[0]})"
            )
        )
    if refused:
        if settings.limit is None or staleness <= settings.limit:
            problems.append(
                Issue(f"update {name!r} is refused at staleness {staleness}, within the limit")
            )
        return problems
    if settings.limit is not None and staleness > settings.limit:
        problems.append(
            Issue(f"update {name!r} is consumed at staleness {staleness}, past the limit")
        )
    if entry.get("weights") != update.get("weights") or entry.get("size") != update.get("size"):
        problems.append(Issue(f"update {name!r}: its entry's weights or size are not its record's"))
    if entry.get("weight") != arithmetic.staleness_weight(settings.kind, settings.a, staleness):
        problems.append(
            Issue(f"update {name!r}: weight {entry.get('weight')} at staleness {staleness}")
        )
    sound(store, entry["weights"])  # every blob of its weights hashed: `damaged` otherwise
    return problems
