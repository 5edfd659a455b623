"""Signed records: who wrote what, against whoever can write the store.

Without a roster nothing is signed, and anyone who can write the store can write a record
under any client's name or publish an average of their own. With one, each client holds an
Ed25519 key pair (`soma keys`), the run names their public keys in a roster file
(`{client: public key}`, JSON or YAML; the config's `roster:`, `soma client --roster`), and
every record a client or an averager writes carries `"signed": {"key", "signature"}`:

- the signature is over the canonical bytes of the record as kept (its JSON tree, with the
  digests of the tensor blobs it points at, less `signed`) and of the name it is kept under
  (so a record cannot be replayed into another round, meeting or slot), with the writer's
  private key (`keys:`, `--keys`: a file, or a template with `{client}`);
- a reader checks it before use (`check`): an unsigned record, one signed by a key not on
  the roster, one signed by another client's key than its writer's, or a record changed
  after it was signed, is refused (`SigningError`) naming the client, the key and the name.
  A record anyone on the roster may write (an average, a secure sum's roster or sum) must be
  signed by somebody on it.

The roster's digest is part of a meeting's identity, so a run with a roster meets apart from
one without (or with another). Who may sign an average is the roster's `averagers` (None:
any member; else those clients only), part of that digest too.

A signature binds the run, not only its name: the first signed write of a run claims its
charter (`<run>/charter`: a random value and the roster's digest, signed by the writer), and
every message signed in the run holds that value. A record copied into another store (a
restart in a fresh bucket, staging vs production) or another run does not verify there, and
a process whose roster is not the charter's is refused at its first signed write or read.
It holds against records copied into a store where the run has begun; a whole store copied,
charter and all, before the rightful run writes anything, is that run's copy (`soma audit`
reports its charter's digest, which two stores that began apart never share). Its starter
pins it against that: the process that claims a charter logs its digest, and a run pinned to
it (`Signing.charter`: config `charter`, `--charter`) takes no other and claims none
(`check_pin`), so a charter copied into a fresh store is refused, naming both digests.
`cryptography` is imported on first use (the `privacy` extra).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soma.errors import SomaError
from soma.files import write_atomic
from soma.round import layout
from soma.store import record_json

if TYPE_CHECKING:
    from soma.store import Store

SIGNED = "signed"  # the key of a record's signature
_LABEL = "soma-signed-record/1"
_CHARTER_LABEL = "soma-run-charter/1"
PRIVATE = 0o600
LOG = logging.getLogger("soma.round.signing")


class SigningError(SomaError, ValueError):
    """A record whose signature does not hold, a roster or a key that cannot be used: the
    message names the client, the key and the record (or the file)."""


class NoRoster(SigningError):
    """A signed run (of rounds or of versions) whose roster was not given and cannot be read
    back from the store."""


def _lib() -> Any:
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import (
            Ed25519PrivateKey,
            Ed25519PublicKey,
        )
    except ImportError:
        raise SigningError(
            "signed records (a roster) need the `cryptography` package: pip install 'soma[privacy]'"
        ) from None
    return Ed25519PrivateKey, Ed25519PublicKey, InvalidSignature, serialization


def short(key: str) -> str:
    """A public key as a refusal names it."""
    return key[:16]


# --- keys and the roster ---------------------------------------------------------------------


def make_keys(out: str | os.PathLike[str], client: int) -> tuple[Path, str]:
    """A fresh key pair for `client`: `<out>/<client>.key` (PEM, mode 0600, written atomically)
    and `<out>/<client>.pub` (the public key, hex); (the private key's path, the public key)."""
    private_cls, _, _, serialization = _lib()
    folder = Path(out)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new folder: its owner's only
    key = private_cls.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = folder / f"{client}.key"
    if path.exists():
        raise SigningError(f"{path} exists: a client's key is made once (remove it to replace)")
    write_atomic(path, pem, mode=PRIVATE)
    public = _public_hex(key)
    write_atomic(folder / f"{client}.pub", f"{public}\n".encode())
    return path, public


def _public_hex(private: Any) -> str:
    _, _, _, serialization = _lib()
    raw = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return raw.hex()


def _check_public(client: object, key: object, where: str) -> str:
    if not isinstance(key, str) or len(key) != 64:
        raise SigningError(f"{where}: client {client}'s key {key!r} is not 64 hex digits")
    try:
        bytes.fromhex(key)
    except ValueError:
        raise SigningError(f"{where}: client {client}'s key {key!r} is not hex") from None
    return key.lower()


def parse_roster(value: object, where: str) -> dict[int, str]:
    """{client: public key hex} from a roster's content (a map of client to key)."""
    if not isinstance(value, Mapping) or not value:
        raise SigningError(f"{where} is not a map of client to public key")
    roster: dict[int, str] = {}
    for client, key in value.items():
        text = str(client)
        if isinstance(client, bool) or not text.isdigit():
            raise SigningError(f"{where}: {client!r} is not a client number")
        roster[int(text)] = _check_public(client, key, where)
    owners: dict[str, int] = {}
    for client, key in sorted(roster.items()):
        if key in owners:
            raise SigningError(
                f"{where}: clients {owners[key]} and {client} have the same key {short(key)}"
            )
        owners[key] = client
    return dict(sorted(roster.items()))


def read_roster(path: str | os.PathLike[str]) -> dict[int, str]:
    """The roster file at `path` (JSON, or YAML when its name ends .yaml/.yml)."""
    where = f"roster {str(path)!r}"
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise SigningError(f"{where} cannot be read: {error.strerror or error}") from None
    try:
        if str(path).endswith((".yaml", ".yml")):
            import yaml

            value = yaml.safe_load(text)
        else:
            value = json.loads(text)
    except Exception as error:  # yaml's and json's own errors
        raise SigningError(f"{where} is not JSON or YAML: {error}") from None
    return parse_roster(value, where)


def merge_rosters(paths: Sequence[str | os.PathLike[str]]) -> dict[int, str]:
    """The sites' rosters (each site's `soma keys` output) as one: every client of each, a
    client named twice with the same key taken once. Refused, naming the client (or the key)
    and both files, when a client has two keys or a key is two clients'; a file that is no
    roster is refused naming it (read_roster)."""
    merged: dict[int, str] = {}
    owners: dict[str, int] = {}  # key -> its client
    where: dict[int, str] = {}  # client -> the file that gave its key first
    for path in paths:
        for client, key in read_roster(path).items():
            if merged.get(client, key) != key:
                raise SigningError(
                    f"client {client} has key {short(merged[client])} in {where[client]!r} and "
                    f"key {short(key)} in {str(path)!r}: a client has one key (were its keys "
                    "made twice, at two sites?)"
                )
            owner = owners.setdefault(key, client)
            if owner != client:
                raise SigningError(
                    f"key {short(key)} is client {owner}'s in {where[owner]!r} and client "
                    f"{client}'s in {str(path)!r}: a key is one client's"
                )
            merged[client] = key
            where.setdefault(client, str(path))
    return dict(sorted(merged.items()))


@functools.lru_cache(maxsize=64)
def _load_private(path: str, stamp: tuple[int, int]) -> Any:
    private_cls, _, _, serialization = _lib()
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (ValueError, TypeError) as error:
        raise SigningError(f"key file {path!r} is not an unencrypted PEM key: {error}") from None
    if not isinstance(key, private_cls):
        raise SigningError(f"key file {path!r} is not an Ed25519 key")
    return key


@dataclass(frozen=True)
class Signing:
    """A run's roster (client -> public key, hex), where this process finds a client's
    private key (`keys`: a path, `{client}` in it standing for the client; None: nowhere),
    who may sign an average (`averagers`: None, any member), and the digest of the charter
    the run is pinned to (`charter`: None, whichever the store holds, taken on first use)."""

    roster: tuple[tuple[int, str], ...]
    keys: str | None = None
    averagers: tuple[int, ...] | None = None
    charter: str | None = None

    @classmethod
    def of(
        cls,
        roster: Mapping[int, str],
        keys: str | os.PathLike[str] | None,
        averagers: Iterable[int] | None = None,
        charter: str | None = None,
    ) -> Signing:
        chosen = None if averagers is None else tuple(sorted(set(averagers)))
        if chosen is not None:
            strangers = [k for k in chosen if k not in roster]
            if not chosen or strangers:
                raise SigningError(
                    f"averagers {list(chosen)}: "
                    + (f"clients {strangers} are not on the roster" if chosen else "none named")
                )
        keys = None if keys is None else str(keys)
        return cls(tuple(sorted(roster.items())), keys, chosen, charter)

    @property
    def members(self) -> dict[int, str]:
        return dict(self.roster)

    @property
    def digest(self) -> str:
        """What a meeting's identity says of the roster (and of who may sign averages, only
        when declared: a run that declares none keeps the key it always had)."""
        said: object = self.roster
        if self.averagers is not None:
            said = {"roster": self.roster, "averagers": list(self.averagers)}
        return hashlib.sha256(record_json.canonical_json(said)).hexdigest()

    def may_average(self, client: int) -> bool:
        """Whether `client` may sign an average."""
        return client in self.members and (self.averagers is None or client in self.averagers)

    def owner(self, key: str) -> int | None:
        """The roster's client whose key `key` is, or None."""
        return next((k for k, theirs in self.roster if theirs == key), None)

    def key_file(self, client: int) -> Path:
        if self.keys is None:
            raise SigningError(
                f"client {client} must sign its records (the run has a roster) and no key file "
                "was given (config key `keys`, --keys)"
            )
        return Path(self.keys.replace("{client}", str(client)))

    def private(self, client: int) -> Any:
        """Client `client`'s private key, checked against the roster (refused by name: a
        missing or unreadable file, one others may read, or another client's key)."""
        path = self.key_file(client)
        try:
            stat = path.stat()
        except OSError as error:
            raise SigningError(
                f"client {client}'s key file {str(path)!r}: {error.strerror or error}"
            ) from None
        if stat.st_mode & 0o077:
            raise SigningError(
                f"client {client}'s key file {str(path)!r} is readable by others "
                f"(mode {stat.st_mode & 0o777:o}): chmod 600 it"
            )
        key = _load_private(str(path), (stat.st_mtime_ns, stat.st_ino))
        mine, public = self.members.get(client), _public_hex(key)
        if mine is None:
            raise SigningError(f"client {client} is not on the roster ({self._who()})")
        if public != mine:
            owner = self.owner(public)
            whose = "no roster member's" if owner is None else f"client {owner}'s"
            raise SigningError(
                f"client {client}'s key file {str(path)!r} holds key {short(public)}, "
                f"{whose}; the roster gives client {client} key {short(mine)}"
            )
        return key

    def any_member(self, among: Iterable[int] | None = None) -> int:
        """The first roster member (of `among`, else of the roster) whose key this process
        holds: who signs what any member may write (an average). Refused when none."""
        candidates = list(self.members) if among is None else list(among)
        candidates += [k for k in self.members if k not in candidates]
        for k in candidates:
            if self.may_average(k) and self.keys is not None:
                try:
                    self.private(k)
                    return k
                except SigningError:
                    continue
        who = (
            "somebody on the run's roster"
            if self.averagers is None
            else (f"one of the averagers {list(self.averagers)}")
        )
        raise SigningError(
            f"an average (or a secure sum) must be signed by {who}, and this process holds "
            f"none of their keys (keys {self.keys!r}; {self._who()})"
        )

    def _who(self) -> str:
        return f"the roster names clients {', '.join(str(k) for k, _ in self.roster)}"


def holds(signing: Signing | None, by: int) -> None:
    """Refuse, before anything is written, a writer whose key this process does not hold."""
    if signing is not None:
        signing.private(by)


# --- canonical bytes, signing, checking -------------------------------------------------------


def _message(name: str, tree: object, loose: str | None, run: str) -> bytes:
    """What is signed: the label, the run's charter value, the name the record is kept
    under, the record's tree and its loose tensors' blob (the digests of every blob it holds)."""
    record = {"label": _LABEL, "run": run, "name": name, "record": tree, "tensors": loose}
    return record_json.canonical_json(record)


# --- the run's charter ------------------------------------------------------------------------

# Each store's charters as this process found them ({run: (digest, value)}): a charter is
# claimed once and never changes, so it is read (and checked) once per process and store.
_CHARTERS: weakref.WeakKeyDictionary[Store, dict[str, tuple[str, str]]] = (
    weakref.WeakKeyDictionary()
)


def _charter_message(name: str, tree: object) -> bytes:
    return record_json.canonical_json({"label": _CHARTER_LABEL, "name": name, "record": tree})


def run_value(store: Store, signing: Signing, name: str, *, by: int | None) -> str:
    """The charter value of the run `name` belongs to, which every signature of it binds.
    The first signed write of a run (`by`, a roster member whose key this process holds)
    claims the charter; a reader (`by` None) finds it or is refused: a signed record of a
    run with no charter was never written by that run. A run pinned to a charter
    (`signing.charter`) takes no other and claims none (`check_pin`)."""
    run = layout.run_of(name) or name.split("/", 1)[0]  # a session's own names: their first part
    known = _CHARTERS.setdefault(store, {})
    if run in known:
        check_pin(run, known[run][0], signing.charter)
    else:
        where = layout.charter(run)
        digest = store.resolve(where)
        if digest is None and by is None:
            raise SigningError(
                f"run {run!r} has no charter ({where!r}) in this store, so none of its "
                "signed records can be from it (copied from another store?)"
            )
        check_pin(run, digest, signing.charter)  # before it is read, or one is claimed
        if digest is None:
            assert by is not None
            digest = _claim_charter(store, signing, run, by)
        known[run] = digest, _read_charter(store, signing, run, digest)
    return known[run][1]


def check_pin(run: str, found: str | None, pinned: str | None) -> None:
    """Refuse `run`'s charter `found` (its digest in the store; None: the store holds none)
    unless it is the one the run is pinned to (`pinned`: config `charter`, --charter; None:
    nothing pinned, the store's is taken on first use). A pinned run claims no charter: a
    charter is a random value signed once, so the one pinned can only be the store's where it
    was claimed, and found anywhere else it was copied there."""
    if pinned is None or found == pinned:
        return
    if found is None:
        raise SigningError(
            f"run {run!r} is pinned to charter {pinned[:12]}, and this store holds no charter "
            "of it: a pinned run claims none (start the run without a pin first, no --charter "
            "nor config `charter`, then pin the digest it prints)"
        )
    raise SigningError(
        f"run {run!r}'s charter in this store is {found[:12]}, and the run is pinned to "
        f"charter {pinned[:12]}: another store's charter (planted, or copied with its records), "
        "so this store is not the run's"
    )


def check_charter(store: Store, signing: Signing, run: str) -> None:
    """Refuse, before anything is written, a process whose roster (or averagers) is not the
    charter's of `run` in `store`, or whose pinned charter (`signing.charter`) the store does
    not hold (`check_pin`); nothing else to say of a run not yet begun."""
    digest = store.resolve(layout.charter(run))
    check_pin(run, digest, signing.charter)
    if digest is not None:
        _CHARTERS.setdefault(store, {})[run] = digest, _read_charter(store, signing, run, digest)


def pinned(store: Store, run: str, signing: Signing | None, charter: str | None) -> Signing | None:
    """A reader's `signing` pinned to the charter `charter` (--charter; None: as it is),
    refused now (`check_pin`) when `run`'s charter in `store` is another, or none."""
    if charter is None:
        return signing
    try:
        check_pin(run, store.resolve(layout.charter(run)), charter)
    except SigningError as error:
        raise SigningError(f"--charter: {error}") from None
    return None if signing is None else dataclasses.replace(signing, charter=charter)


def charter_roster(store: Store, run: str) -> str | None:
    """The roster digest `run`'s charter in `store` names (the roster and the averagers: the
    charter holds their digest, not the averagers themselves); None without a charter. Its
    signature is not checked here: every signed record's check reads it (`_read_charter`)."""
    where = layout.charter(run)
    digest = store.resolve(where)
    if digest is None:
        return None
    whose = f"run {run!r}'s charter ({where!r})"
    tree, _ = record_json.parse_record(store.get_record(digest), whose)
    said = tree.get("roster") if isinstance(tree, dict) else None
    return said if isinstance(said, str) else None


def for_reader(
    store: Store,
    run: str,
    roster: str | os.PathLike[str],
    averagers: Iterable[int] | None = None,
) -> Signing:
    """The roster file `roster` as a reader of `run` holds it (no private key), with the
    averagers the run declared (`averagers`, --averagers; None: any member), which its
    digest covers: without them a run that declared some is read as signed by another roster.
    Averagers given that are not the run's (its charter's digest) are refused, naming both."""
    signing = Signing.of(read_roster(roster), None, averagers)
    said = None if signing.averagers is None else charter_roster(store, run)
    if said is not None and said != signing.digest:
        plain = Signing.of(signing.members, None).digest
        declared = " (the run declared no averagers)" if said == plain else ""
        raise SigningError(
            f"averagers {list(signing.averagers or ())}: run {run!r}'s charter names roster "
            f"{said[:12]}{declared}, and roster {str(roster)!r} with averagers "
            f"{list(signing.averagers or ())} is {signing.digest[:12]}: another roster file "
            "or other averagers than the run's"
        )
    return signing


def _claim_charter(store: Store, signing: Signing, run: str, by: int) -> str:
    where = layout.charter(run)
    value = {"run": run, "value": os.urandom(32).hex(), "roster": signing.digest}
    key = signing.private(by)
    said = {"key": _public_hex(key), "signature": key.sign(_charter_message(where, value)).hex()}
    digest = store.put_value({**value, SIGNED: said})
    store.claim(where, digest)
    found = store.resolve(where)  # this call's, or whoever's came first
    if found is None:
        raise SigningError(f"run {run!r}'s charter {where!r} was unbound as it was claimed")
    if found == digest:  # this process's claim: the digest its starter pins
        LOG.info(
            "charter %s: pin it with --charter %s (config charter: %s) so that no other is "
            "taken (run %r's charter, claimed now)",
            found, found, found, run,
            extra={"progress": True},
        )  # fmt: skip
    return found


def _read_charter(store: Store, signing: Signing, run: str, digest: str) -> str:
    """The charter's value, once its signature is a roster member's and its roster is
    this process's (else refused, naming both rosters' digests)."""
    where = layout.charter(run)
    whose = f"run {run!r}'s charter ({where!r}, record {digest[:12]})"
    tree, _ = record_json.parse_record(store.get_record(digest), whose)
    said = tree.get(SIGNED) if isinstance(tree, dict) else None
    body = {k: v for k, v in tree.items() if k != SIGNED} if isinstance(tree, dict) else {}
    value = body.get("value")
    if not isinstance(said, dict) or not isinstance(value, str) or body.get("run") != run:
        raise SigningError(f"{whose} is not a signed charter of that run")
    _verify(signing, said, _charter_message(where, body), whose)
    if body.get("roster") != signing.digest:
        raise SigningError(
            f"{whose} was written under roster {str(body.get('roster'))[:12]}, and this "
            f"process's roster is {signing.digest[:12]} ({signing._who()}): another roster "
            "file (or other averagers) than the run's"
        )
    return value


def _verify(signing: Signing, said: Mapping[str, Any], message: bytes, whose: str) -> int:
    """The roster member whose key made `said` over `message`; refused naming `whose`."""
    key, signature = said.get("key"), said.get("signature")
    if not isinstance(key, str) or not isinstance(signature, str):
        raise SigningError(f"{whose}: its signature is not a key and a signature")
    owner = signing.owner(key)
    if owner is None:
        raise SigningError(f"{whose} is signed by key {short(key)}, which is not on the roster")
    _, public_cls, invalid, _ = _lib()
    try:
        public_cls.from_public_bytes(bytes.fromhex(key)).verify(bytes.fromhex(signature), message)
    except (invalid, ValueError):
        raise SigningError(
            f"{whose}: its signature by client {owner}'s key {short(key)} does not verify "
            "(changed after it was signed, moved from another name, or from another store's "
            "run)"
        ) from None
    return owner


def _tree(store: Store, value: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The record's tree and loose-tensor digest as the store will keep them: its tensors'
    blobs are written now (the signed record reuses them), the record itself is not."""
    from soma.store import codecs  # tensors: torch, which a reader of records never needs

    encoded = codecs.encode(dict(value))
    for ref, tensors in encoded.maps:
        ref["$tensors"] = store.put_tensors(tensors)
    loose = store.put_tensors(encoded.loose_map()) if encoded.loose else None
    assert isinstance(encoded.tree, dict) and SIGNED not in encoded.tree
    return encoded.tree, loose


def signed(
    store: Store, signing: Signing | None, value: Mapping[str, Any], *, name: str, by: int | None
) -> dict[str, Any]:
    """`value` signed by client `by` for the name `name` (unchanged without a roster)."""
    if signing is None:
        return dict(value)
    if by is None:
        raise SigningError(f"nobody on the roster signs {name!r}")
    key = signing.private(by)
    run = run_value(store, signing, name, by=by)
    signature = key.sign(_message(name, *_tree(store, value), run))
    return {**value, SIGNED: {"key": _public_hex(key), "signature": signature.hex()}}


def put(
    store: Store, signing: Signing | None, value: Mapping[str, Any], *, name: str, by: int | None
) -> str:
    """Keep `value` signed (see `signed`); its digest."""
    return store.put_value(signed(store, signing, value, name=name, by=by))


def keep(
    store: Store, signing: Signing | None, value: Mapping[str, Any], *, name: str, by: int | None
) -> str:
    """Keep `value` signed under `name` (Store.keep); its digest."""
    digest = put(store, signing, value, name=name, by=by)
    store.bind(name, digest)
    return digest


def check(
    store: Store,
    signing: Signing | None,
    digest: str,
    *,
    name: str,
    writer: int | None,
    what: str,
) -> int | None:
    """Refuse the record `digest` kept at `name` unless the roster's `writer` signed it (None:
    anyone on the roster), for this run of this store; who signed it (None without a roster:
    nothing to check). `what` names the record."""
    if signing is None:
        return None
    tree, loose = record_json.parse_record(store.get_record(digest), f"{what} (record {digest})")
    whose = f"{what} ({name!r}, record {digest[:12]})"
    said = tree.get(SIGNED) if isinstance(tree, dict) else None
    if not isinstance(said, dict):
        raise SigningError(f"{whose} is unsigned; the run's roster requires every record signed")
    key = said.get("key")
    owner = signing.owner(key) if isinstance(key, str) else None
    if writer is not None and owner is not None and owner != writer:
        raise SigningError(
            f"{whose} is signed by client {owner}'s key {short(str(key))}, not client {writer}'s"
        )
    body = {k: v for k, v in tree.items() if k != SIGNED}
    run = run_value(store, signing, name, by=None)
    _verify(signing, said, _message(name, body, loose, run), whose)
    return owner


def check_average(
    store: Store, signing: Signing | None, digest: str, *, name: str, what: str
) -> int | None:
    """Who signed the average record `digest` at `name`: a roster member allowed to average
    (`Signing.averagers`), refused otherwise; None without a roster. The one averager rule
    of every reader (the round, `soma status`/`export`, `soma audit`)."""
    signer = check(store, signing, digest, name=name, writer=None, what=what)
    if signing is not None and signer is not None and not signing.may_average(signer):
        raise SigningError(
            f"{what} ({name!r}, record {digest[:12]}) is signed by client {signer}, who is not "
            f"among the run's averagers {list(signing.averagers or ())}"
        )
    return signer
