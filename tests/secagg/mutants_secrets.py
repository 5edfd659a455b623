"""Broken variants of secure aggregation's secrets and threshold (registered into
tests/mutants.py's MUTANTS): each breaks one guarantee of issue 19's items 3-5 and keeps
everything else running, so that only the test of that guarantee can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_S = "tests/secagg/test_secrets.py::"
_ROUND = _S + "test_a_secure_round_keeps_each_clients_secrets_0700_and_deletes_them_at_its_reveal"


@mutant(
    "secrets_threshold_half_is_enough",
    caught_by=["tests/secagg/test_secrets.py", "-k", "at_or_below_half"],
)
def _secrets_threshold_half_is_enough() -> None:
    """The run takes a threshold of half a round's clients (the hosting rule still holds)."""
    from soma.config.spec import RunSpec

    def check_threshold(self, sampled):
        hosted = len(self.mine or ())
        if hosted >= self.secure and hosted < self.clients:
            raise self.refused(f"{self.named('mine', 'secure')}: hosts too many")

    _replace(RunSpec, "_check_threshold", check_threshold)


@mutant(
    "secrets_one_process_hosts_the_threshold",
    caught_by=["tests/secagg/test_secrets.py", "-k", "process_hosting"],
)
def _secrets_one_process_hosts_the_threshold() -> None:
    """A process may host as many clients as the threshold (the majority rule still holds)."""
    from soma.config.spec import RunSpec

    def check_threshold(self, sampled):
        if 2 * self.secure <= sampled:
            raise self.refused(f"{self.named('secure')}: at or below half")

    _replace(RunSpec, "_check_threshold", check_threshold)


@mutant(
    "secrets_mask_twice",
    caught_by=[
        _S + "test_a_rerun_train_job_writes_no_second_masked_input",
        _S + "test_nothing_masked_is_written_by_a_second_masking_with_the_same_secrets",
    ],
)
def _secrets_mask_twice() -> None:
    """No claim of a client's one masking: a second attempt masks with the same secrets."""
    from soma.secagg import phases

    _replace(phases, "claim_masking", lambda store, session, mine: None)


@mutant("secrets_folder_as_the_umask_says", caught_by=[_ROUND])
def _secrets_folder_as_the_umask_says() -> None:
    """The client's folder is made as the umask says (0777 under umask 0), not 0700."""
    import soma.config.secrets as private

    def own_folder(path, client):
        path.mkdir(parents=True, exist_ok=True)
        return path

    _replace(private, "own_folder", own_folder)


@mutant("secrets_file_as_the_umask_says", caught_by=[_ROUND])
def _secrets_file_as_the_umask_says() -> None:
    """The secrets file is written as the umask says (0666 under umask 0), not 0600."""
    import json

    import soma.config.secrets as private
    from soma.files import write_atomic

    def keep(path, client, record):
        private.own_folder(path.parent, client)
        write_atomic(path, json.dumps(record).encode())

    _replace(private, "keep", keep)


@mutant("secrets_never_deleted", caught_by=[_ROUND])
def _secrets_never_deleted() -> None:
    """The reveal job leaves the client's secrets behind."""
    import soma.config.secrets as private

    _replace(private, "forget", lambda path: None)
