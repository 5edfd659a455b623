"""Broken variants of the core guarantees, for proving the suite catches them.

A mutant is a name and a function that monkeypatches one piece of soma with a
broken version. `SOMA_MUTANT=<name>` in the environment applies it: conftest.py
does so for the test process, and every helper script a test starts as a real
subprocess calls `apply_from_environment()` too, so a racing child is as broken
as its parent. tests/test_mutations.py runs the relevant tests under each mutant
and asserts they fail.

Each module that owns a guarantee registers its mutants with `@mutant("name")`
below; patch the module attribute that soma itself looks up at call time.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable

MUTANTS: dict[str, Callable[[], None]] = {}
# The pytest node ids (or files, or "file -k expr") that must fail under each mutant.
CATCHERS: dict[str, list[str]] = {}


def mutant(
    name: str, *, caught_by: list[str]
) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register `apply` as mutant `name`; `caught_by` are the tests that must fail under it."""

    def register(apply: Callable[[], None]) -> Callable[[], None]:
        MUTANTS[name] = apply
        CATCHERS[name] = caught_by
        return apply

    return register


def _replace(module: object, name: str, broken: Callable) -> None:
    """Patch `module.name` with `broken`, which must take the same parameters: a mutant that
    drifted from what it replaces would be caught by a TypeError, not by the tests."""
    original = getattr(module, name)
    wanted = list(inspect.signature(original).parameters)
    given = list(inspect.signature(broken).parameters)
    if wanted != given:
        raise TypeError(f"mutant for {name} takes {given}, the real one {wanted}")
    setattr(module, name, broken)


def apply_from_environment() -> str | None:
    name = os.environ.get("SOMA_MUTANT")
    if not name:
        return None
    if name not in MUTANTS:
        raise KeyError(f"unknown mutant {name!r}; known: {sorted(MUTANTS)}")
    MUTANTS[name]()
    return name


# --- fedavg (soma/fedavg.py) -------------------------------------------------


@mutant(
    "fedavg_returns_the_first",
    caught_by=["tests/test_federated.py"],
)
def _fedavg_returns_the_first() -> None:
    import soma.aggregate

    _replace(soma.aggregate, "_fold", lambda mean, export, weight: None)


@mutant("fedavg_ignores_sizes", caught_by=["tests/test_federated.py"])
def _fedavg_ignores_sizes() -> None:
    import soma.aggregate

    real = soma.aggregate._size_of
    _replace(soma.aggregate, "_size_of", lambda size, index: real(size, index) and 1.0)


@mutant("fedavg_averages_the_integers", caught_by=["tests/test_federated.py"])
def _fedavg_averages_the_integers() -> None:
    import soma.aggregate

    _replace(soma.aggregate, "_averageable", lambda dtype: True)


# --- store (soma/store/__init__.py) ---------------------------------------------------


@mutant(
    "claim_as_resolve_then_bind",
    caught_by=[
        "tests/test_store.py::test_race_eight_threads_for_one_name_exactly_one_wins_and_is_written_down",
        "tests/test_store.py::test_race_eight_processes_for_one_name_exactly_one_wins_and_is_written_down",
    ],
)
def _claim_as_resolve_then_bind() -> None:
    """claim written out of resolve and bind: a race with a doc comment on it.

    The sleep models the real window between the two: on a shared folder it is a
    round trip for the lookup plus the bind's own temporary, write and fsync, which is
    milliseconds on NFS. Widened to 0.2 s here so that racers released together by the
    tests' start barrier all land in it on any machine, however loaded: the race tests
    then catch this mutant every time, not when the scheduler happens to oblige.
    """
    import time

    import soma.store

    def claim(self, name: str, digest: str, *, at_commit: bool = False) -> bool:
        if self.resolve(name) is not None:
            return False
        time.sleep(0.2)
        self.bind(name, digest)
        return True

    _replace(soma.store.Store, "claim", claim)


# --- the round barrier (soma/round/__init__.py) ---------------------------------------------------

# each mutant's first test that catches it (the rest of the file adds seconds, not catches)
_ROUND = "tests/test_round.py"


@mutant(
    "gather_binds_for_claim",
    caught_by=[_ROUND, "-k", "and_says_a_different_thing_when_complete_and_the_average_never_came"],
)
def _gather_binds_for_claim() -> None:
    import soma.round.once

    def bind_instead(store, place, who, *, check_holder):
        store.bind(place.claimed, who)
        return True

    _replace(soma.round.once, "_claim", bind_instead)


@mutant(
    "gather_never_waits",
    caught_by=[
        "tests/test_participation.py::"
        "test_past_the_deadline_the_round_is_averaged_over_whoever_came_if_they_are_a_quorum"
    ],
)
def _gather_never_waits() -> None:
    """A round goes on as soon as anyone is there: with a quorum below the sample, the rest
    are not waited for until the deadline (without one, `_enough` still holds the round)."""
    import soma.round

    _replace(soma.round, "_complete", lambda here, clients: bool(here))


@mutant(
    "gather_never_publishes",
    caught_by=[_ROUND, "-k", "the_only_client_of_a_round_averages_it_itself_and_publishes_it"],
)
def _gather_never_publishes() -> None:
    import soma.round.once

    _replace(soma.round.once, "publish", lambda store, name, digest: None)


@mutant(
    "gather_does_not_weigh",
    caught_by=[_ROUND, "-k", "the_size_travels_in_the_record_and_the_average_weighs_by_it"],
)
def _gather_does_not_weigh() -> None:
    import dataclasses

    import soma.round

    real = soma.round._updates

    def unweighed(store, inputs):
        return (dataclasses.replace(u, size=None) for u in real(store, inputs))

    _replace(soma.round, "_updates", unweighed)


# --- participation (soma/run/participation.py, the quorum in soma/round/__init__.py) --------------


@mutant(
    "round_ignores_the_quorum",
    caught_by=["tests/test_participation.py", "-k", "below_the_quorum_the_deadline_names"],
)
def _round_ignores_the_quorum() -> None:
    """Whoever is there is averaged, however few: a round of one out of ten goes on."""
    import soma.round

    _replace(soma.round, "_enough", lambda came, needed: bool(came))


@mutant(
    "participation_ignores_sampling",
    caught_by=["tests/test_participation.py", "-k", "a_sample_is_drawn_from_the_seed"],
)
def _participation_ignores_sampling() -> None:
    """Everyone takes part in every round, whatever the participation says."""
    import soma.run.participation

    _replace(
        soma.run.participation,
        "sampled",
        lambda seed, round, clients, participation=None: list(range(clients)),
    )


# --- slurm (soma/round/holders.py: is the holder of a claim provably gone?) -----------------------
# Taking over an averaging is safe only when its holder is provably gone. tests/test_slurm.py
# checks it against real Slurm jobs; these catchers are fast and in-process, because
# Snakemake's jobs never apply a mutant.


@mutant(
    "holders_never_gone",
    caught_by=[
        "tests/test_round.py::test_a_holder_that_is_provably_gone_is_taken_over_and_the_average_published_once"
    ],
)
def _holders_never_gone() -> None:
    """Nobody is ever proven gone: a dead averager wedges its round forever."""
    import soma.round.holders

    _replace(soma.round.holders, "gone", lambda holder: False)


@mutant(
    "holders_always_gone",
    caught_by=[
        "tests/test_round.py::test_and_says_a_different_thing_when_complete_and_the_average_never_came"
    ],
)
def _holders_always_gone() -> None:
    """Everybody is gone: a live averager is taken over, and a round may average twice."""
    import soma.round.holders

    _replace(soma.round.holders, "gone", lambda holder: True)


# --- refusals (soma/nodes.py, soma/store/names.py, soma/aggregate.py) -----------------------------
# Each refusal comes before anything is changed; these let something through, or refuse late.


@mutant(
    "load_writes_as_it_goes",
    caught_by=["tests/test_refusals.py", "-k", "load or tied"],
)
def _load_writes_as_it_goes() -> None:
    """No check of what only shows when copying: a meta tensor raises half way through the
    copies (the nodes half loaded), and tied weights given two values take the last one."""
    import soma.nodes

    _replace(soma.nodes, "_refuse_what_cannot_be_copied", lambda copies: None)


@mutant(
    "load_lets_the_last_tie_win",
    caught_by=["tests/test_refusals.py", "-k", "tied or shared"],
)
def _load_lets_the_last_tie_win() -> None:
    """Tied weights given different values are taken as equal: the last key silently wins."""
    import soma.nodes

    _replace(soma.nodes, "_same_values", lambda a, b: True)


@mutant(
    "names_accept_control_characters",
    caught_by=["tests/test_refusals.py", "-k", "control_or_format_character"],
)
def _names_accept_control_characters() -> None:
    """A name may hold U+202E, U+200B, NUL...: `ls` shows another name than the one there."""
    import soma.store.names

    _replace(soma.store.names, "_hidden_character_problem", lambda text: None)


@mutant(
    "names_leave_the_length_to_the_filesystem",
    caught_by=["tests/test_refusals.py", "-k", "too_long_for_the_filesystem"],
)
def _names_leave_the_length_to_the_filesystem() -> None:
    """No limit on a name's or a segment's length: the kernel's bare ENAMETOOLONG says it."""
    import soma.store.names

    _replace(soma.store.names, "_length_problem", lambda text: None)
    _replace(soma.store.names, "_segment_length_problem", lambda segment: None)


@mutant(
    "fedavg_folds_any_tensor",
    caught_by=["tests/test_refusals.py", "-k", "cannot_fold"],
)
def _fedavg_folds_any_tensor() -> None:
    """A meta or sparse tensor goes into the mean: torch raises its own error half way."""
    import soma.aggregate

    _replace(soma.aggregate, "_unaverageable", lambda tensor: None)


# --- scale (soma/round/tree.py, soma/cli.py) -----------------------------------------------------


@mutant(
    "tree_folds_unweighted",
    caught_by=["tests/test_scale.py", "-k", "deep_tree or one_node or taken_over"],
)
def _tree_folds_unweighted() -> None:
    """A node's mean weighs its children the same, whatever their weights."""
    import dataclasses

    import soma.round.tree

    real = soma.round.tree._fold

    def unweighted(store, parts):
        return real(store, [dataclasses.replace(part, weight=1.0) for part in parts])

    _replace(soma.round.tree, "_fold", unweighted)


@mutant(
    "tree_drops_the_last_child",
    caught_by=["tests/test_scale.py", "-k", "widths_and_children or deep_tree"],
)
def _tree_drops_the_last_child() -> None:
    """A node's children stop one short: the last input of every full node is never folded."""
    import soma.round.tree

    _replace(
        soma.round.tree,
        "children",
        lambda index, below, fan_in: range(index * fan_in, min((index + 1) * fan_in, below) - 1),
    )


@mutant(
    "tree_claims_nothing",
    caught_by=["tests/test_scale.py", "-k", "whoever_does_which_node"],
)
def _tree_claims_nothing() -> None:
    """Every helper computes every node it finds unpublished: nodes computed more than once."""
    import soma.round.once
    import soma.round.tree

    _replace(soma.round.tree, "_offset", lambda who, width: 0)
    real = soma.round.once._claim

    def always(store, place, who, *, check_holder):
        real(store, place, who, check_holder=check_holder)
        return True

    _replace(soma.round.once, "_claim", always)


@mutant(
    "secure_round_keeps_the_export_in_the_clear",
    caught_by=["tests/test_secure_round.py", "-k", "correlates"],
)
def _secure_round_keeps_the_export_in_the_clear() -> None:
    """A secure round that also keeps each trained export in the store, as a plain round does."""
    import soma.secagg.round
    from soma.round.once import POLL

    real = soma.secagg.round.take_part

    def leaky(store, meeting, clients, train, *, deadline=3600.0, backoff=POLL):
        def leak(k):
            trained = train(k)
            if not isinstance(trained, str):
                store.put_value(trained[0])
            return trained

        return real(store, meeting, clients, leak, deadline=deadline, backoff=backoff)

    _replace(soma.secagg.round, "take_part", leaky)


# --- strategies and secure aggregation: each family registers its own mutants -----------

# --- a store's health (soma/health/__init__.py, and the store's part of it) -----------------------


@mutant(
    "gc_ignores_the_grace",
    caught_by=["tests/test_health.py", "-k", "gc_keeps_what or refreshes_an_old_blob"],
)
def _gc_ignores_the_grace() -> None:
    """Every unreachable blob is old enough: a writer's blobs go before its bind."""
    import soma.health

    _replace(soma.health, "_untouched", lambda mtime, cutoff: True)


@mutant(
    "gc_follows_only_tensor_blobs",
    caught_by=["tests/test_health.py", "-k", "gc_keeps_what"],
)
def _gc_follows_only_tensor_blobs() -> None:
    """A record's digests written as text (an average's weights and state) are not followed:
    gc deletes what names reach."""
    import soma.health.reach

    real = soma.health.reach.references

    def tensors_only(tree, loose):
        return (ref for ref in real(tree, loose) if ref[3])

    _replace(soma.health.reach, "references", tensors_only)


@mutant(
    "gc_removes_without_the_recheck",
    caught_by=[
        "tests/test_health.py",
        "tests/test_reliability.py",
        "-k",
        "put_between_gcs_listing or put_old_unreachable_blobs_again",
    ],
)
def _gc_removes_without_the_recheck() -> None:
    """gc deletes what it listed as old even when a put refreshed it since."""
    import os

    import soma.health

    def collect(store, digest, cutoff):
        path = store.blob_path(digest)
        try:
            size = path.stat().st_size
            os.unlink(path)
        except FileNotFoundError:
            return None
        return size

    _replace(soma.health, "_collect", collect)


@mutant(
    "gc_removes_live_temporaries",
    caught_by=["tests/test_health.py", "-k", "temporaries_of_writers"],
)
def _gc_removes_live_temporaries() -> None:
    """Every writer is taken for gone: a live writer's temporary is removed under it."""
    import soma.health

    _replace(soma.health, "_writer_gone", lambda store, temporary: True)


@mutant(
    "put_never_refreshes",
    caught_by=[
        "tests/test_health.py",
        "tests/test_reliability.py",
        "-k",
        "refreshes_an_old_blob or put_old_unreachable_blobs_again",
    ],
)
def _put_never_refreshes() -> None:
    """A put of a blob already there leaves its mtime: gc's grace never starts again."""
    import os

    import soma.store

    real = soma.store.Store._existing_blob

    def unrefreshed(self, digest, size):
        path = self.blob_path(digest)
        try:
            before = os.stat(path)
        except FileNotFoundError:
            return real(self, digest, size)
        found = real(self, digest, size)
        if found == soma.store._SOUND:
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        return found

    _replace(soma.store.Store, "_existing_blob", unrefreshed)


@mutant(
    "keep_trusts_a_corrupt_blob",
    caught_by=["tests/test_health.py", "-k", "repairs_a_corrupt_blob or rerun_repairs"],
)
def _keep_trusts_a_corrupt_blob() -> None:
    """A blob already there is taken as it is, whatever its size or mark (the old put)."""
    import soma.store

    def trusted(self, digest, size):
        return soma.store._SOUND if self.blob_path(digest).exists() else soma.store._MISSING

    _replace(soma.store.Store, "_existing_blob", trusted)


@mutant(
    "verify_skips_hashing",
    caught_by=["tests/test_health.py", "-k", "damaged_blob_is_reported or commands_exit"],
)
def _verify_skips_hashing() -> None:
    """verify takes a tensor blob's name for its hash (it only checks that it is there)."""
    import soma.health

    _replace(
        soma.health,
        "_hash_blob",
        lambda store, digest, on_chunk: digest if store.has(digest) else None,
    )


# --- meetings of one round that differ (soma/round/__init__.py) -----------------------------------


@mutant(
    "elsewhere_never_looks",
    caught_by=["tests/test_round.py", "-k", "another_start"],
)
def _elsewhere_never_looks() -> None:
    """A client that joined another meeting of the round is never noticed: both sides wait
    out the deadline and blame each other for never coming."""
    import soma.round

    _replace(soma.round._Elsewhere, "check", lambda self, waiting: None)


@mutant(
    "elsewhere_counts_averaged_meetings",
    caught_by=["tests/test_round.py", "-k", "rival"],
)
def _elsewhere_counts_averaged_meetings() -> None:
    """A meeting of the round already averaged (an earlier run under that name) is taken for
    a rival: a new run is stopped by the old one's records."""
    import soma.round

    _replace(soma.round._Elsewhere, "_rival", lambda self, key: key != self.meeting.key)


@mutant(
    "elsewhere_leaves_no_note",
    caught_by=["tests/test_round.py", "-k", "note"],
)
def _elsewhere_leaves_no_note() -> None:
    """Whoever finds a rival stops without telling it: a rival still training its other
    clients finds only a gone process's records, and waits out its deadline."""
    import soma.round

    _replace(soma.round._Elsewhere, "_tell", lambda self, key, client: None)


# --- the one atomic writer (soma/store/files.py) --------------------------------------------------


@mutant(
    "write_atomic_writes_in_place",
    caught_by=["tests/test_files.py", "-k", "killed"],
)
def _write_atomic_writes_in_place() -> None:
    """The file is truncated and written under its final name: a writer killed half way
    leaves a partial file (or the new one where the old was wanted)."""
    import soma.store.files
    import soma.workflow

    def in_place(path, data, *, mode=None):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
        try:
            whole = isinstance(data, bytes | bytearray | memoryview)
            for chunk in [data] if whole else data:
                soma.store.files.write_all(fd, memoryview(chunk).cast("B"))
        finally:
            os.close(fd)

    _replace(soma.store.files, "write_atomic", in_place)
    soma.workflow.write_atomic = soma.store.files.write_atomic


# --- the store layout and the round's records (soma/round/layout.py, soma/round/records.py) ---


@mutant(
    "advice_looks_for_an_unfanned_started_marker",
    caught_by=["tests/test_health.py", "-k", "1001_client_round"],
)
def _advice_looks_for_an_unfanned_started_marker() -> None:
    """The advice looks for a train job's marker at `started/<k>` whatever the client count
    (the bug of 1,001-client rounds): it stops naming the Snakemake target."""
    import soma.health.advice
    from soma.round import layout

    def unfanned(self, run, r, meeting, k):
        if meeting is None:
            return False
        name = layout.started(layout.meeting(run, r, meeting), k, 1)
        return self.store.resolve(name) is not None

    _replace(soma.health.advice.Advisor, "_started", unfanned)


@mutant(
    "client_records_read_unchecked",
    caught_by=["tests/test_layout.py", "-k", "refused_naming"],
)
def _client_records_read_unchecked() -> None:
    """A client record is taken as it is: one without weights fails later, as a KeyError."""
    import soma.round.records

    def unchecked(value, *, client, name, digest=None):
        if "dropped" in value:
            return soma.round.records.DropRecord(client, value["dropped"], value.get("by"))
        return soma.round.records.ClientRecord(
            client, value["weights"], value["size"], value.get("extra"), value.get("own")
        )

    _replace(soma.round.records, "parse_client", unchecked)


# --- the run layer (soma/run/) ---------------------------------------------------------------


@mutant(
    "options_read_an_exponent_as_text",
    caught_by=["tests/test_run_layer.py", "-k", "reads_as_yaml"],
)
def _options_read_an_exponent_as_text() -> None:
    """YAML 1.1 alone: `1e-1` stays the text '1e-1' (what the workflow used to read)."""
    import soma.run.options

    def value(text):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text

    _replace(soma.run.options, "value", value)


@mutant(
    "identity_digests_raw_option_text",
    caught_by=["tests/test_run_layer.py", "-k", "typed_two_ways"],
)
def _identity_digests_raw_option_text() -> None:
    """A run's declared options as typed: `lr: 1e-1` and `lr: 0.1` become two runs."""
    import soma.run.identity

    real = soma.run.identity.declared

    def declared(config):
        what = real(config)
        task, strategy = config["task"], config.get("strategy", "fedavg")
        what["task_options"] = (config.get("task_options") or {}).get(task) or {}
        what["strategy_options"] = (config.get("strategy_options") or {}).get(strategy) or {}
        return what

    _replace(soma.run.identity, "declared", declared)


@mutant(
    "spec_checks_no_tree",
    caught_by=["tests/test_run_layer.py", "-k", "tree_with_a_strategy"],
)
def _spec_checks_no_tree() -> None:
    """The deep check forgets the tree: a client trains round 0 before the averaging refuses."""
    import dataclasses

    import soma.run.spec

    real = soma.run.spec.RunSpec.checked

    def checked(self):
        return real(dataclasses.replace(self, tree=None))

    _replace(soma.run.spec.RunSpec, "checked", checked)


@mutant(
    "a_client_leaves_a_round_that_needs_it_silently",
    caught_by=["tests/test_run_layer.py", "-k", "leaves"],
)
def _a_client_leaves_a_round_that_needs_it_silently() -> None:
    """A client that cannot take part drops out even when the round cannot go on without it."""
    import soma.run.step
    from soma.round import drop

    def leave(store, meeting, client, why):
        drop(store, meeting, mine=client, why=why)
        return soma.run.step.Outcome(client, dropped=why)

    _replace(soma.run.step, "leave", leave)


# --- strategies: each family registers its own mutants ---------------------------------------
# Imported last: they use `mutant` and `_replace` from this module.
import mutants_bucketgc  # noqa: E402, F401
import mutants_dp  # noqa: E402, F401
import mutants_evaluate  # noqa: E402, F401
import mutants_fedopt  # noqa: E402, F401
import mutants_fsync  # noqa: E402, F401
import mutants_guard  # noqa: E402, F401
import mutants_lease  # noqa: E402, F401
import mutants_local  # noqa: E402, F401
import mutants_personal  # noqa: E402, F401
import mutants_privacy  # noqa: E402, F401
import mutants_records  # noqa: E402, F401
import mutants_robust  # noqa: E402, F401
import mutants_s3  # noqa: E402, F401
import mutants_secagg  # noqa: E402, F401
import mutants_secrets  # noqa: E402, F401
import mutants_sign  # noqa: E402, F401
import mutants_sites  # noqa: E402, F401
import mutants_study  # noqa: E402, F401
