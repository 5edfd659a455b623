"""Broken variants of how a client's secrets are read back (soma.config.secrets.read) and
checked before use (soma.secagg.roster.check_own; registered into tests/mutants.py's
MUTANTS): each keeps secure rounds working, so that only a swapped folder can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_S = "tests/secagg/test_secrets.py::"
_OPEN = _S + "test_secrets_others_could_read_or_change_are_refused_when_read_naming_file_and_mode"
_OWNER = _S + "test_secrets_of_another_owner_are_refused_when_read_naming_the_owner"
_OTHER = _S + "test_another_clients_secrets_in_a_clients_folder_are_refused_naming_both"
_SWAPPED = _S + "test_secrets_swapped_for_others_valid_ones_are_refused_before_use"


def _checks_but(skip: str) -> None:
    """soma.config.secrets._private without its check `skip` ("mode", "owner", "kind")."""
    import os
    import stat

    import soma.config.secrets as private

    def _private(found: os.stat_result, what: str, client: int, kind: int) -> None:
        mode = stat.S_IMODE(found.st_mode)
        if skip != "kind" and stat.S_IFMT(found.st_mode) != kind:
            raise private.SecretsError(f"client {client}'s secrets {what} is not a folder")
        if skip != "owner" and found.st_uid != os.geteuid():
            raise private.SecretsError(f"client {client}'s secrets {what} belongs to another")
        if skip != "mode" and mode & 0o077:
            raise private.SecretsError(f"client {client}'s secrets {what} has mode {mode:o}")

    _replace(private, "_private", _private)


@mutant("secrets_read_ignores_the_mode", caught_by=[_OPEN])
def _secrets_read_ignores_the_mode() -> None:
    """Secrets whose folder or file its group or others may read or change are read."""
    _checks_but("mode")


@mutant("secrets_read_ignores_the_owner", caught_by=[_OWNER])
def _secrets_read_ignores_the_owner() -> None:
    """Secrets in a folder (or file) of another user are read."""
    _checks_but("owner")


@mutant("secrets_read_any_clients", caught_by=[_OTHER])
def _secrets_read_any_clients() -> None:
    """A secrets file is read whichever client's it says it is."""
    import json

    import soma.config.secrets as private

    real = private.read

    def read(path, client):  # noqa: ANN001, ANN202
        try:
            return real(path, client)
        except private.SecretsError as error:
            if "holds client" not in str(error):
                raise
            return json.loads(path.read_text())

    _replace(private, "read", read)


@mutant("secrets_unchecked_against_published", caught_by=[_SWAPPED])
def _secrets_unchecked_against_published() -> None:
    """Secrets read back are used whatever keys the client published."""
    import soma.secagg.phases as phases

    def check_own(store, secrets) -> None:  # noqa: ANN001
        return None

    _replace(phases, "check_own", check_own)
