"""A client's secure-aggregation secrets between its workflow jobs: a folder of its own.

(Here in the run layer, not in soma.secagg, because the template is checked when the
Snakefile is read, which imports no torch.)

In the workflow a client's phases are separate jobs (soma.workflow.secure), so its private state
(two X25519 private keys, its self-mask seed, its own shares: `Secrets.private_record`) is
kept between them in a file. Whoever reads that file and the store can unmask the client's
export, so the file lives in a folder that belongs to that client alone:

    secure_aggregation: {threshold: 6, secrets: "/home/{client}/.soma/{run}"}

`secrets` is a template of the client's folder, with `{client}` (required: one folder a
client) and optionally `{run}`; `~` is the home of the user the job runs as. By default
`~/.soma/secrets/{run}/{client}`, outside the working folder. The folder is made mode 0700
and each file 0600, on purpose (not as the umask says), and a folder that belongs to another
user is refused. The file of a round, `round-<r>.json`, is deleted by the client's `reveal`
job, its last use, once its shares are revealed (the unmasking needs only the store).

Against whom this holds: the folder keeps a client's secrets from the other Unix users
only. Every job of one user can read every folder of that user; and Snakemake starts every
job as the user who runs it. So when all the clients' jobs run as one user (the workflow as
shipped, locally or on Slurm), secure aggregation protects the clients' exports from whoever
reads the store only, not from that user (nor root); the `start` job says so in its log.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from soma.errors import SomaError

DEFAULT = "~/.soma/secrets/{run}/{client}"
FOLDER_MODE = 0o700  # the client's folder: its user only, whatever the umask
FILE_MODE = 0o600  # a secrets file: its user only, whatever the umask
FIELDS = ("client", "run")


class SecretsError(SomaError):
    """A client's secrets folder cannot be used as asked; names the client and the folder."""


def template_refusal(template: object) -> str | None:
    """Why `template` cannot be a client's secrets folder (None: it can). Pure, so that the
    run's first check (soma.config.spec) refuses it before any job."""
    if not isinstance(template, str) or not template.strip():
        return f"{template!r} is not a folder's path"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        return f"{template!r} is not a template of a folder: {error}"
    fields = [name for _, name, spec, conversion in parsed if name is not None]
    odd = [
        name
        for _, name, spec, conversion in parsed
        if name is not None and (name not in FIELDS or spec or conversion)
    ]
    if odd:
        return f"{template!r} has {{{odd[0]}}}; a secrets folder knows only {{client}} and {{run}}"
    if "client" not in fields:
        return (
            f"{template!r} has no {{client}}: every client would keep its secrets in one "
            "folder, readable by the others' jobs"
        )
    return None


def folder(template: str | None, run: str, client: int) -> Path:
    """The client's secrets folder, `~` as the home of the user this job runs as."""
    path = (template or DEFAULT).format(client=client, run=run)
    return Path(os.path.expanduser(path))


def path_of(template: str | None, run: str, round: int, client: int) -> Path:
    """The file of the client's secrets for one round."""
    return folder(template, run, client) / f"round-{round}.json"


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def own_folder(path: Path, client: int) -> Path:
    """Make the client's folder (its parents as the umask says), mode 0700 on purpose;
    refused, naming it, if another user owns it (they could read what is written in it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, FOLDER_MODE)
    except FileExistsError:
        pass
    found = os.stat(path)
    if found.st_uid != os.geteuid():
        raise SecretsError(
            f"client {client}'s secrets folder {path} belongs to {_owner(found.st_uid)}, not to "
            f"{_owner(os.geteuid())}, who runs this job: they could read its secrets (config "
            "key `secure_aggregation.secrets`)"
        )
    os.chmod(path, FOLDER_MODE)
    return path


def keep(path: Path, client: int, record: Mapping[str, Any]) -> None:
    """Write the client's secrets (0600, atomically) in its own folder (0700)."""
    from soma.files import write_atomic  # the one writer (soma.store imports torch)

    own_folder(path.parent, client)
    text = json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n"
    write_atomic(path, text.encode("utf-8"), mode=FILE_MODE)
    os.chmod(path, FILE_MODE)


def _private(found: os.stat_result, what: str, client: int, kind: int) -> None:
    """Refuse, naming `what`, its owner and its mode, a secrets folder or file that is not of
    the `kind` asked, not this job's user's, or open to its group or to others: whoever could
    write it could have swapped in secrets of their own (a parent folder others can write
    lets them rename it away and put theirs in its place), whoever could read it has them."""
    mode, folder = stat.S_IMODE(found.st_mode), kind == stat.S_IFDIR
    if stat.S_IFMT(found.st_mode) != kind:
        raise SecretsError(
            f"client {client}'s secrets {what} is not a {'folder' if folder else 'file'} "
            "(a link or something else put in its place): refused (config key "
            "`secure_aggregation.secrets`)"
        )
    if found.st_uid != os.geteuid():
        raise SecretsError(
            f"client {client}'s secrets {what} belongs to {_owner(found.st_uid)}, not to "
            f"{_owner(os.geteuid())}, who runs this job: they could have put secrets of their "
            "own there; refused (config key `secure_aggregation.secrets`)"
        )
    if mode & 0o077:
        raise SecretsError(
            f"client {client}'s secrets {what} has mode {mode:o}: its group or others may read "
            f"or change it (it is made {FOLDER_MODE if folder else FILE_MODE:o}); "
            "refused (config key `secure_aggregation.secrets`)"
        )


def read(path: Path, client: int) -> dict[str, Any]:
    """The client's secrets, as `keep` wrote them: its folder and its file checked as `keep`
    made them (this job's user's, nobody else's to read or write) before a byte is read, and
    the file refused unless it is the client's."""
    try:
        _private(os.lstat(path.parent), f"folder {path.parent}", client, stat.S_IFDIR)
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise SecretsError(
            f"client {client}'s secrets {path} are not there: its keys job ran as another user, "
            "on another machine without that folder, or the round was already revealed (its "
            "secrets are then deleted); rerun the round from its keys in a new run"
        ) from None
    except OSError as error:  # ELOOP: a link in the file's place
        raise SecretsError(
            f"client {client}'s secrets file {path} cannot be opened as a file of its own: "
            f"{error.strerror or error}; refused"
        ) from None
    with os.fdopen(handle, encoding="utf-8") as f:
        _private(os.fstat(f.fileno()), f"file {path}", client, stat.S_IFREG)
        try:
            record = json.load(f)
        except ValueError as error:
            raise SecretsError(
                f"client {client}'s secrets file {path} is not JSON: {error}"
            ) from None
    if not isinstance(record, dict) or record.get("client") != client:
        whose = record.get("client") if isinstance(record, dict) else None
        raise SecretsError(
            f"client {client}'s secrets file {path} holds client {whose!r}'s secrets: refused"
        )
    return record


def forget(path: Path) -> None:
    """Delete the client's secrets of a round (its reveal job, their last use)."""
    from soma.files import fsync_folder

    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_folder(path.parent)


def one_user_warning(template: str | None, run: str) -> str:
    """What the `start` job logs under secure aggregation: against whom it holds when every
    client's jobs run as this job's user (Snakemake starts every job as the user who runs it)."""
    me = _owner(os.geteuid())
    also = "" if os.geteuid() == 0 else " (nor root)"
    return (
        f"secure aggregation: the workflow's jobs run as user {me}; each client's secrets are "
        f"kept in a folder of its own ({folder(template, run, 0)} for client 0, mode 0700), "
        f"which keeps them only from other users. If every client's jobs run as {me} (as "
        "Snakemake starts them), secure aggregation protects the clients' exports from "
        f"readers of the store only, not from user {me}{also}: see README.md, 'Privacy'"
    )
