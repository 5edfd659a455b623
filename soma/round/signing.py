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
one without (or with another). `cryptography` is imported on first use (the `privacy` extra).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soma.errors import SomaError
from soma.files import write_atomic
from soma.store import codecs

if TYPE_CHECKING:
    from soma.store import Store

SIGNED = "signed"  # the key of a record's signature
_LABEL = "soma-signed-record/1"
PRIVATE = 0o600


class SigningError(SomaError, ValueError):
    """A record whose signature does not hold, a roster or a key that cannot be used: the
    message names the client, the key and the record (or the file)."""


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
    """A run's roster (client -> public key, hex) and where this process finds a client's
    private key (`keys`: a path, `{client}` in it standing for the client; None: nowhere)."""

    roster: tuple[tuple[int, str], ...]
    keys: str | None = None

    @classmethod
    def of(cls, roster: Mapping[int, str], keys: str | os.PathLike[str] | None) -> Signing:
        return cls(tuple(sorted(roster.items())), None if keys is None else str(keys))

    @property
    def members(self) -> dict[int, str]:
        return dict(self.roster)

    @property
    def digest(self) -> str:
        """What a meeting's identity says of the roster."""
        return hashlib.sha256(codecs.canonical_json(self.roster)).hexdigest()

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
            if k in self.members and self.keys is not None:
                try:
                    self.private(k)
                    return k
                except SigningError:
                    continue
        raise SigningError(
            "an average (or a secure sum) must be signed by somebody on the run's roster, and "
            f"this process holds none of their keys (keys {self.keys!r}; {self._who()})"
        )

    def _who(self) -> str:
        return f"the roster names clients {', '.join(str(k) for k, _ in self.roster)}"


def holds(signing: Signing | None, by: int) -> None:
    """Refuse, before anything is written, a writer whose key this process does not hold."""
    if signing is not None:
        signing.private(by)


# --- canonical bytes, signing, checking -------------------------------------------------------


def _message(name: str, tree: object, loose: str | None) -> bytes:
    """What is signed: the label, the name the record is kept under, the record's tree and
    its loose tensors' blob (the digests of every blob it holds)."""
    record = {"label": _LABEL, "name": name, "record": tree, "tensors": loose}
    return codecs.canonical_json(record)


def _tree(store: Store, value: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The record's tree and loose-tensor digest as the store will keep them: its tensors'
    blobs are written now (the signed record reuses them), the record itself is not."""
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
    signature = key.sign(_message(name, *_tree(store, value)))
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
) -> None:
    """Refuse the record `digest` kept at `name` unless the roster's `writer` signed it (None:
    anyone on the roster); nothing to check without a roster. `what` names the record."""
    if signing is None:
        return
    tree, loose = codecs.parse_record(store.get(digest), f"{what} (record {digest})")
    whose = f"{what} ({name!r}, record {digest[:12]})"
    said = tree.get(SIGNED) if isinstance(tree, dict) else None
    if not isinstance(said, dict):
        raise SigningError(f"{whose} is unsigned; the run's roster requires every record signed")
    key, signature = said.get("key"), said.get("signature")
    if not isinstance(key, str) or not isinstance(signature, str):
        raise SigningError(f"{whose}: its signature is not a key and a signature")
    owner = signing.owner(key)
    if owner is None:
        raise SigningError(f"{whose} is signed by key {short(key)}, which is not on the roster")
    if writer is not None and owner != writer:
        raise SigningError(
            f"{whose} is signed by client {owner}'s key {short(key)}, not client {writer}'s"
        )
    _, public_cls, invalid, _ = _lib()
    body = {k: v for k, v in tree.items() if k != SIGNED}
    try:
        public_cls.from_public_bytes(bytes.fromhex(key)).verify(
            bytes.fromhex(signature), _message(name, body, loose)
        )
    except (invalid, ValueError):
        raise SigningError(
            f"{whose}: its signature by client {owner}'s key {short(key)} does not verify "
            "(changed after it was signed, or moved from another name)"
        ) from None
