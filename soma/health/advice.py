"""What fixes a damaged blob, said as a command where one works (for soma.health).

A damaged blob is placed by walking up from it to the names (`contexts`): under an
average's `weights` or `state`, `soma repair` rebuilds it from the average's inputs; a
client's export (or its record) is retrained by its workflow train job or its `soma
client` round, whose command is rebuilt from the meeting's identity (task, options, seed,
strategy, participation, quorum); the workflow's start is rerun by its start job; a
record that says who did what and when (an average's record, a holder's) cannot be
rebuilt, and the advice is the file to restore. Messages advise only what works.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from typing import Any

from soma.health.common import client_names, release_names
from soma.health.reach import Graph
from soma.round import layout
from soma.round.layout import run_of
from soma.store import Store
from soma.workflow import receipts


def average_text(record: dict) -> str:
    return f"the average of round {record.get('round')} of run {record.get('run')!r}"


def is_average(tree: object) -> bool:
    return isinstance(tree, dict) and {"inputs", "strategy", "weights", "clients"} <= set(tree)


def contexts(graph: Graph, digest: str, depth: int = 0) -> Iterator[tuple]:
    """Where a blob sits, up to the names: ("average", record) when it is an average's
    weights or state or under them; ("input", record, i) when it is the i-th input of an
    average; ("round-start", run, round) when it is the weights a round started from;
    ("name", name, is the named blob itself)."""
    for ref in graph.parents.get(digest, []):
        if ref.name is not None:
            yield ("name", ref.name, graph.names.get(ref.name) == digest)
            continue
        tree = graph.records.get(ref.record)
        if isinstance(tree, dict):
            if is_average(tree) and ref.at in ('value["weights"]', 'value["state"]'):
                yield ("average", ref.record)
                continue
            m = re.match(r'^value\["inputs"\]\[(\d+)\]', ref.at)
            if is_average(tree) and m:
                yield ("input", ref.record, int(m[1]))
                continue
            if ref.at in ('value["start"]', 'value["state_before"]', 'value["state"]') and (
                "run" in tree and "round" in tree
            ):
                yield ("round-start", tree["run"], tree["round"])
                continue
        if depth < 8:
            yield from contexts(graph, ref.record, depth + 1)


class Advisor:
    """What fixes a damaged blob, said as a command where one works."""

    def __init__(self, store: Store, graph: Graph) -> None:
        self.store, self.graph = store, graph

    def advise(self, digest: str) -> tuple[str | None, str]:
        """(the average record whose recomputation rebuilds it, or None; what to do)."""
        found = list(contexts(self.graph, digest))
        for c in found:
            if c[0] == "average":
                record = self.graph.records[c[1]]
                return c[1], (
                    f"`soma repair --store {self.store.directory}` rebuilds it from the inputs "
                    f"of {average_text(record)} (record {c[1]})"
                )
        ranked: list[tuple[int, str]] = []
        for c in found:
            if c[0] == "input":
                record = self.graph.records[c[1]]
                k = record["inputs"][c[2]]["client"]
                ranked.append(
                    (0, self._client(record["run"], record["round"], record.get("meeting"), k))
                )
            elif c[0] == "round-start":
                ranked.append((1, self._round_start(c[1], c[2])))
            elif c[0] == "name":
                ranked.append(self._by_name(c[1], c[2]))
        if not ranked:
            return None, f"no name reaches it: `soma gc --store {self.store.directory}` removes it"
        return None, min(ranked)[1]

    def bad_name(self, name: str) -> str:
        """What fixes a name file that holds no digest: `soma repair` when the records that
        point at it say what it held, else the client's rerun or a backup."""
        from soma.health.rebuild import name_value

        held = name_value(self.store, self.graph, name)
        if held is not None:
            return (
                f"`soma repair --store {self.store.directory}` binds it again to {held}, "
                "which the records that point at it say it held"
            )
        m = layout.parse(name)
        rest = m.rest if m else ""
        if m is not None and m.client is not None:
            advice = self._client(m.run, m.round, m.meeting, m.client)
            return f"{advice}; the rerun binds the name again"
        backup = f"nothing records what it pointed at: restore {name!r} from a backup"
        if "/computed/" in f"/{rest}":
            return f"{backup}, or remove the file (it only counts an averaging for `soma status`)"
        if rest.startswith("started/") or "/takeover/" in rest or rest.endswith("/claimed"):
            return (
                f"{backup}, or remove the file once the round is averaged (the record of who "
                "held the work is needed only while it is pending)"
            )
        return backup

    def _by_name(self, name: str, itself: bool) -> tuple[int, str]:
        m = layout.parse(name)
        store = self.store.directory
        if m:
            run, r, meeting, rest = m.run, m.round, m.meeting, m.rest
            if m.client is not None:
                return 0, self._client(run, r, meeting, m.client)
            if (k := layout.release_of(rest)) is not None:
                return 0, self._client(run, r, meeting, k)
            repair = (
                f"`soma repair --store {store}` reassembles it from the meeting's other records"
            )
            if m.published is not None or rest.endswith("/published"):
                path = self.store.blob_path(self.graph.names[name]) if itself else "it"
                return 3, (
                    f"it is the record of the average of round {r} of run {run!r} (name {name!r}): "
                    f"{repair} (identity, client records, the averager's record; kept only if "
                    f"it hashes right); if they are damaged too, restore {path} from a backup"
                )
            if rest == "about":
                return 4, (
                    f"it is the identity of round {r}'s meeting in run {run!r} (name {name!r}): "
                    f"{repair} (its average) when they are intact; otherwise restore it from a "
                    "backup, or leave it (only `soma status` reads it)"
                )
            return 5, (
                f"it is a record of who held or did work in round {r} of run {run!r} (name "
                f"{name!r}): {repair} (its average) when it was the averager's; otherwise "
                "restore it from a backup, or leave it once the round is averaged (it is needed "
                "only while the work is pending)"
            )
        run = run_of(name)
        if run is not None and name == layout.start(run):
            target = receipts.start_path(run)
            return 1, (
                f"rerun the workflow's start job of run {run!r}: `snakemake --cores 2 --until "
                f"{target} --forcerun {target}` in the workflow's folder (the seed makes the "
                "same weights, and their put replaces the blob)"
            )
        if run is not None and name.startswith(layout.starting(run, "")):
            return 1, (
                f"rerun any process of run {run!r} from its first round (`soma client`, `soma "
                "simulate`, or the workflow's start job): the seed makes the same start weights, "
                "and their put replaces the blob"
            )
        if run is not None and name.startswith(layout.evaluation(run, "")):
            return 2, (
                f"rerun the workflow's evaluation job that kept {name!r} (`--forcerun` its "
                f"{receipts.evaluation_path(run, '<r>')}, or {receipts.start_path(run)} for "
                "the starting weights)"
            )
        return 6, f"rerun whatever kept {name!r} into {store}"

    def _about(self, run: str, r: int, meeting: str | None) -> dict | None:
        if meeting is None:
            return None
        digest = self.graph.names.get(layout.about(layout.meeting(run, r, meeting)))
        tree = self.graph.records.get(digest) if digest else None
        return tree if isinstance(tree, dict) else None

    def _markers(self, run: str, r: int, meeting: str, k: int) -> list[str]:
        """Where a workflow train job of client k marks that it started in the meeting: fanned
        out as the meeting's client records are (soma.round.layout), by its client count."""
        prefix = layout.meeting(run, r, meeting)
        clients = (self._about(run, r, meeting) or {}).get("clients")
        if isinstance(clients, int) and not isinstance(clients, bool):
            return [layout.started(prefix, k, clients)]
        return layout.started_spellings(prefix, k)

    def _started(self, run: str, r: int, meeting: str | None, k: int) -> bool:
        """Whether a workflow train job of client k started in the meeting."""
        if meeting is None:
            return False
        names = self._markers(run, r, meeting, k)
        return any(self.store.resolve(name) is not None for name in names)

    def _train_receipt(self, run: str, r: int, meeting: str, k: int) -> tuple[str, str]:
        """(the receipt whose rerun retrains client k, which job writes it): the client's own
        (`client/<k>.json`), or, when its job trained a batch of clients (config
        `clients_per_job`, or a round in one job), the batch's (`batch/<b>.json`), which the
        job's started marker names (soma.workflow.training)."""
        for name in self._markers(run, r, meeting, k):
            digest = self.store.resolve(name)
            holder = self.graph.records.get(digest) if digest is not None else None
            batch = holder.get("batch") if isinstance(holder, dict) else None
            if isinstance(batch, int) and not isinstance(batch, bool):
                return receipts.batch_path(run, r, batch), f"the train job of its batch {batch}"
        return receipts.client_path(run, r, k), "its train job"

    def _client(self, run: str, r: int, meeting: str | None, k: int) -> str:
        return self._release(run, r, meeting, k) or self._retrain(run, r, meeting, k)

    def _release(self, run: str, r: int, meeting: str | None, k: int) -> str | None:
        """What fixes a lost part of client k's distributed-DP release (`release/<k>`), or
        None when it released none (or under reproducible noise, whose rerun writes the same
        bytes). Its noise came from the operating system: a rerun draws other noise, so a
        seeded retraining (`_retrain`) would not write the lost bytes. A release that never
        landed (its writer stopped between its claim and its weights) is forgotten by the
        rerun (soma.round.client.released), which then releases afresh; one that landed (bound
        as the client's record) cannot be drawn again, and the rerun stops with Contradicts."""
        if meeting is None:
            return None
        prefix = layout.meeting(run, r, meeting)
        claimed = [self.graph.names[n] for n in release_names(prefix, k) if n in self.graph.names]
        about = self._about(run, r, meeting) or {}
        options = about.get("options") if isinstance(about.get("options"), dict) else {}
        if not claimed or options.get("noise") == "reproducible_not_private":
            return None
        what = f"it is client {k}'s distributed-DP release of round {r} of run {run!r}"
        if not any(self.graph.names.get(n) in claimed for n in client_names(prefix, k)):
            return (
                f"{what}, which never landed (its writer stopped between claiming the release "
                "and putting its weights, so none of its noise reached the store): once that "
                f"writer is gone, rerun client {k}'s round {r} (its `soma client` or its "
                "workflow train job): it forgets the release and releases afresh"
            )
        return (
            f"{what}: its noise was drawn from the operating system and cannot be drawn "
            "again (a rerun releases other bytes, and stops with Contradicts: the client "
            "released once already); restore the blob from a backup"
        )

    def _retrain(self, run: str, r: int, meeting: str | None, k: int) -> str:
        if meeting is not None and self._started(run, r, meeting, k):
            target, job = self._train_receipt(run, r, meeting, k)
            return (
                f"it is client {k}'s export of round {r} of run {run!r}: rerun {job}, "
                f"`snakemake --cores 2 --until {target} --forcerun {target}` in the workflow's "
                "folder (its training is seeded, so it writes the same bytes, and their put "
                "replaces the blob)"
            )
        what = f"it is client {k}'s export of round {r} of run {run!r}"
        seeded = (
            "its training is seeded, so it writes the same bytes, and their put replaces the blob"
        )
        about = self._about(run, r, meeting)
        if about is not None and "task" in (about.get("config") or {}):
            return (
                f"{what}: rerun {self._soma_client(run, r, about, k)} ({seeded}; the rounds "
                "already averaged are found, not redone)"
            )
        if about is not None:
            return (
                f"{what}, contributed by a program of yours (soma.gather or contribute): rerun "
                f"that client's round {r} with the same export (a put of the same bytes "
                "replaces the blob)"
            )
        words = ["soma", "client", "--store", str(self.store.directory), "--run", run]
        words += ["--rounds", str(r + 1), "--mine", str(k)]
        return (
            f"{what}: rerun `{shlex.join(words)}` with the run's other arguments, or its "
            f"workflow train job, `--forcerun {receipts.client_path(run, r, k)}` "
            f"({seeded})"
        )

    def _round_start(self, run: str, r: int) -> str:
        if r == 0 and self.store.resolve(layout.start(run)) is not None:
            return self._by_name(layout.start(run), False)[1]
        if r == 0:
            return (
                f"it is the weights round 0 of run {run!r} started from: rerun any client of "
                "the run for one round (`soma client ... --rounds 1`, with the run's options), "
                "which puts the same starting weights from the same seed"
            )
        return (
            f"it is the weights round {r} of run {run!r} started from, and round {r - 1}'s "
            "average record, which would rebuild it, is not readable: restore it from a backup"
        )

    def _soma_client(self, run: str, r: int, about: dict[str, Any], k: int) -> str:
        """The `soma client` command that retrains client `k` up to round `r`, from the
        meeting's identity (task, options, seed, strategy, participation, quorum)."""
        config = about.get("config") or {}
        words = ["soma", "client", "--store", str(self.store.directory), "--run", run]
        words += ["--rounds", str(r + 1), "--clients", str(about.get("clients")), "--mine", str(k)]
        words += ["--task", str(config["task"])]
        for key, value in sorted((config.get("options") or {}).items()):
            words += ["--option", f"{key}={json.dumps(value)}"]
        if "seed" in config:
            words += ["--seed", str(config["seed"])]
        if about.get("strategy") not in (None, "fedavg"):
            words += ["--strategy", str(about["strategy"])]
        for key, value in sorted((about.get("options") or {}).items()):
            words += ["--strategy-option", f"{key}={json.dumps(value)}"]
        if about.get("expected") is not None:
            words += ["--participation", str(len(about["expected"]))]
        if about.get("quorum") is not None:
            words += ["--quorum", str(about["quorum"])]
        return f"`{shlex.join(words)}`"
