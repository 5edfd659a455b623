"""Rebuilding what a store lost from what it still holds, kept only when it hashes right.

A content-addressed store is its own checksum: a lost blob's digest is known (a name or a
record holds it), so any way of making its bytes again is checked by hashing them; a
candidate that does not hash to the lost digest is never kept. What soma can remake:

- an average's `weights` and `state`: `recompute_average` runs the record's strategy over
  the inputs it names, exactly as the round did (deterministic arithmetic);
- a meeting's identity (`<meeting>/about`): its fields are in the meeting's average records
  and the run's other meetings (task, options, seed), and the meeting's key is the
  sha256 of the identity, so a candidate is checked twice;
- an average's record: the identity, the client records (which inputs: the place's key is
  the digest of exactly those), the averager's holder record (`computed/`), the left-out
  clients, and the recomputed weights and state, built by the rounds' own builder
  (`soma.round.records.average_record`), so a candidate is the record the round wrote or none;
- a holder's record of the averager (`claimed`, `computed/`, `takeover/`): the average
  record names it (`averaged_by`);
- a tree round's (soma.round.tree): its identity and average record (the fan-in is in
  both), and each node's record, computed again from the inputs the average names;
- a name file that holds no digest, or the digest of no blob (`name_value`): what it held,
  when the records that point at it say so (see there). A lost record of who held a tree
  node already published cannot be remade and is read by nobody: repair removes its names.

A client's own record (it says who sent it, and when) and a train job's `started` record
cannot be remade; the first is replaced by rerunning the client (soma.health.advice says how).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterator
from typing import Any

from soma.errors import SomaError
from soma.health.common import client_names, release_names
from soma.health.reach import Graph
from soma.round import layout, records
from soma.store import Store, codecs
from soma.store.errors import StoreError

_LEFT = ("came after the round was averaged", "never came")
_MAX_TRIES = 4096  # candidates (records, or who came), at most, per lost record


def recompute_average(store: Store, record: dict[str, Any]) -> tuple[str, str | None]:
    """Put an average's weights and state again, computed from what its record names
    (strategy, options, start, state before, clients, inputs in order) exactly as the round
    did; their digests. Deterministic, so equal to the record's when its inputs are sound."""
    from soma.strategies import Update, at_round, has_own, load_strategy, under_secure_aggregation

    strategy = load_strategy(record["strategy"], record.get("options") or {}, trusted=False)
    if has_own(strategy, "for_round"):  # bucketing, bias correction: the round and seed
        seed = record["seed"] if "seed" in record else _seed_of(store, record)
        strategy = at_round(strategy, round=record["round"], seed=seed)
    if record.get("secure"):  # stepped from a secure sum, as the round told it
        strategy = under_secure_aggregation(strategy)
    start, before = record.get("start"), record.get("state_before")
    previous = None if start is None else store.recall_digest(start, lazy=True)
    state = None if before is None else store.recall_digest(before)

    if record.get("tree") or record.get("secure"):  # the strategy stepped from the mean
        mean = _mean_again(store, record, previous)
        weights, new_state = strategy.from_mean(previous, mean, state, clients=record["clients"])
        return store.put_value(weights), None if new_state is None else store.put_value(new_state)

    def updates() -> Iterator[Update]:
        for given in record["inputs"]:
            extra = given.get("extra")
            yield Update(
                client=given["client"],
                size=given["size"],
                weights=store.recall_digest(given["weights"], lazy=True),
                extra=None if extra is None else store.recall_digest(extra, lazy=True),
            )

    weights, new_state = strategy.aggregate(previous, updates(), state, clients=record["clients"])
    return store.put_value(weights), None if new_state is None else store.put_value(new_state)


def _seed_of(store: Store, record: dict[str, Any]) -> int | None:
    """The run's seed, for `Strategy.for_round`: an average record does not hold it, the
    meeting's identity (its `about` record) does, in its config. None when unreadable, as a
    round that declared no seed was averaged with."""
    try:
        prefix = layout.meeting(record["run"], record["round"], record["meeting"])
        about = store.recall(layout.about(prefix))
    except (SomaError, StoreError, OSError, KeyError, TypeError, ValueError):
        return None
    config = about.get("config") if isinstance(about, dict) else None
    return config.get("seed") if isinstance(config, dict) else None


def _mean_again(store: Store, record: dict[str, Any], previous: Any) -> Any:
    """The mean a tree (soma.round.tree) or a secure sum (soma.secagg.round) handed the strategy."""
    if record.get("secure"):
        from soma.secagg.round import mean_of_sum

        return mean_of_sum(store, record["secure"]["sum"], store.recall_digest(record["start"]))
    from soma.round import Input, tree
    from soma.strategies import load_strategy, uniform

    strategy = load_strategy(record["strategy"], record.get("options") or {}, trusted=False)
    inputs = [Input(i["client"], i["weights"], i["size"]) for i in record["inputs"]]
    leaves = tree.leaves_of(inputs, uniform=uniform(strategy))
    root = tree.recompute(store, leaves, record["tree"]["fan_in"])
    return store.recall_digest(root.mean, lazy=True)


def digest_of(value: object) -> str:
    """The digest `Store.put_value` gives a value without tensors, computed, not written."""
    encoded = codecs.encode(value)
    if encoded.maps or encoded.loose:
        raise ValueError("digest_of takes a value without tensors")
    return hashlib.sha256(codecs.record_bytes(encoded.tree, None)).hexdigest()


def rebuild_record(store: Store, graph: Graph, digest: str) -> str | None:
    """Put record `digest` back if it can be remade from what the store still holds (see
    the module docs); what it was (for the report), or None."""
    for name in [ref.name for ref in graph.parents.get(digest, []) if ref.name is not None]:
        m = layout.parse(name)
        if not m:
            continue
        run, r, key, prefix = m.run, m.round, m.meeting, m.prefix
        if m.rest == "about":
            found, what = _abouts(store, graph, run, r, key), "the identity of"
        elif m.published is not None:
            place = m.published or None
            found, what = _averages(store, graph, prefix, place), "the average record of"
        elif m.holder is not None:
            found, what = _holders(store, graph, prefix, m.holder), "a holder record of"
        elif node := _TREE_NODE.match(m.rest):
            nodes = _tree_nodes(store, graph, prefix, node["key"])
            found, what = (record for _, _, record in nodes), "a tree node of"
        else:
            continue
        for value in itertools.islice(found, _MAX_TRIES):
            if digest_of(value) == digest:
                if store.put_value(value) != digest:  # pragma: no cover - digest_of is put's
                    raise AssertionError(f"record {digest} did not come back as itself")
                return f"{what} round {r} of run {run!r} (record {digest}, name {name!r})"
    return None


def _record(store: Store, graph: Graph, name: str) -> dict[str, Any] | None:
    """The record a name holds, when it can be read (None: lost, corrupt, or not a dict)."""
    digest = graph.names.get(name)
    if digest is None:
        return None
    try:
        value = store.recall_digest(digest)
    except (StoreError, SomaError, OSError):
        return None
    return value if isinstance(value, dict) else None


def _named(graph: Graph, prefix: str) -> list[str]:
    return sorted(n for n in graph.names if n.startswith(prefix))


def _published(graph: Graph, prefix: str) -> dict[str, str]:
    """The meeting's published averagings: {the place's key: its `published` name}."""
    found = {}
    for name in _named(graph, layout.inputs(prefix)):
        parsed = layout.parse(name)
        if parsed is not None and parsed.published:
            found[parsed.published] = name
    return found


def _meeting_averages(store: Store, graph: Graph, prefix: str) -> list[dict[str, Any]]:
    names = [layout.average(prefix), *_published(graph, prefix).values()]
    return [r for r in (_record(store, graph, n) for n in names) if r and "inputs" in r]


def _abouts(store: Store, graph: Graph, run: str, r: int, key: str) -> Iterator[dict]:
    """Identities of the meeting, from its averages and the run's other meetings' configs;
    each checked against the meeting's key (the identity's sha256) before it is offered."""
    configs: list[dict] = []
    trees: list[Any] = [None]  # the run's fan-ins: a tree of one node was averaged flat
    for name in _named(graph, layout.rounds(run)):
        parsed = layout.parse(name)
        about = _record(store, graph, name) if parsed and parsed.rest == "about" else None
        if about and isinstance(about.get("config"), dict) and about["config"] not in configs:
            configs.append(about["config"])
        if about and about.get("tree") not in trees:
            trees.append(about["tree"])
    configs.append({})
    for a in _meeting_averages(store, graph, layout.meeting(run, r, key)):
        members, clients, needed = a.get("expected"), a.get("clients"), a.get("quorum")
        everyone = members == list(range(clients)) if isinstance(clients, int) else False
        expecteds = [None, members] if everyone else [members]
        quorums = [None, needed] if needed == len(members or []) else [needed]
        fan_ins = trees if not a.get("tree") else [None]
        for config, expected, quorum, fan_in in itertools.product(
            configs, expecteds, quorums, fan_ins
        ):
            identity = {
                "clients": clients,
                "start": a.get("start"),
                "state": a.get("state_before"),
                "strategy": a.get("strategy"),
                "options": a.get("options"),
                "config": config,
                "expected": expected,
                "quorum": quorum,
                **({} if fan_in is None else {"tree": fan_in}),
                **_tree_and_secure(a),
            }
            if hashlib.sha256(codecs.canonical_json(identity)).hexdigest() == key:
                yield {"run": run, "round": r, **identity}


def _tree_and_secure(average: dict[str, Any]) -> dict[str, Any]:
    """The identity's `tree` (fan-in) and `secure` (threshold), as its average says them
    (a tree of one node was averaged flat: its fan-in is tried from the run's meetings)."""
    found = {}
    tree = average.get("tree")
    if isinstance(tree, dict) and "fan_in" in tree:
        found["tree"] = tree["fan_in"]
    secure = average.get("secure")
    if isinstance(secure, dict) and "threshold" in secure:
        found["secure"] = secure["threshold"]
    return found


def _holders(store: Store, graph: Graph, prefix: str, place: str) -> Iterator[dict]:
    """The averager's holder record, as the place's published average names it."""
    average = _record(store, graph, layout.published(layout.averaging(prefix, place)))
    if average and isinstance(average.get("averaged_by"), dict):
        yield average["averaged_by"]


def _averages(store: Store, graph: Graph, prefix: str, place: str | None) -> Iterator[dict]:
    """Average records of the meeting's averaging at `place` (None: any of its places),
    reassembled as `soma.round._average` wrote them."""
    from soma.round import Input, Meeting, inputs_key

    about = _record(store, graph, layout.about(prefix))
    if about is None:
        return
    identity = {k: v for k, v in about.items() if k not in ("run", "round")}
    try:
        meeting = Meeting(
            about["run"],
            about["round"],
            identity["clients"],
            identity.get("start"),
            identity.get("state"),
            identity.get("strategy", "fedavg"),
            identity.get("options") or {},
            identity.get("config") or {},
            None if identity.get("expected") is None else tuple(identity["expected"]),
            identity.get("quorum"),
            identity.get("tree"),
            trusted=False,  # named by the store: only a built-in strategy loads
        )
    except (SomaError, KeyError, TypeError):
        return
    came, dropped = [], {}
    for k in meeting.members:
        name = meeting.client(k)
        value = _record(store, graph, name)
        if value is None:
            continue
        try:
            record = records.parse_client(value, client=k, name=name)
        except SomaError:
            continue
        if isinstance(record, records.DropRecord):
            dropped[k] = record.dropped
        elif isinstance(record, records.ClientRecord):
            came.append(Input(k, record.weights, record.size, record.extra, graph.names[name]))
    places = [place] if place else sorted(_published(graph, prefix))
    for key in places:
        for inputs in itertools.islice(_subsets(came, meeting.needed), _MAX_TRIES):
            if inputs_key(meeting.key, inputs) == key:
                yield from _average_records(store, graph, meeting, inputs, dropped, prefix, key)
                break


def _subsets(came: list, needed: int) -> Iterator[list]:
    """Who may have come: everyone who wrote, then fewer, down to the quorum."""
    for size in range(len(came), max(needed, 1) - 1, -1):
        yield from (list(c) for c in itertools.combinations(came, size))


def _average_records(
    store: Store,
    graph: Graph,
    meeting,
    inputs: list,
    dropped: dict[int, str],
    prefix: str,
    key: str,
) -> Iterator[dict]:
    holders = [
        r
        for r in (
            _record(store, graph, n) for n in _named(graph, f"{layout.averaging(prefix, key)}/")
        )
        if r and "host" in r and "pid" in r
    ]
    if not holders:
        return
    try:
        grown = _tree_of(store, meeting, inputs)
        weights, state = recompute_average(
            store,
            {
                "tree": grown,
                "round": meeting.round,
                "seed": meeting.config.get("seed"),
                "strategy": meeting.strategy,
                "options": dict(meeting.options),
                "start": meeting.start,
                "state_before": meeting.state,
                "clients": meeting.clients,
                "inputs": [{"client": i.client, "weights": i.weights, "size": i.size,
                            "extra": i.extra} for i in inputs],
            },
        )  # fmt: skip
    except (SomaError, StoreError, OSError, KeyError, TypeError, ValueError):
        return
    came = {i.client for i in inputs}
    left = [k for k in meeting.members if k not in came]
    undropped = [k for k in left if k not in dropped]
    for reasons in itertools.product(_LEFT, repeat=len(undropped)):
        why = dict(zip(undropped, reasons, strict=True))
        left_out = {k: dropped.get(k) or why[k] for k in left}
        for with_records in (True, False):  # gather names the client records; the workflow not
            for by in holders:
                yield records.average_record(
                    meeting,
                    left_out=left_out,
                    inputs=[
                        records.input_entry(
                            i.client, i.weights, i.size, i.extra, i.record if with_records else None
                        )
                        for i in inputs
                    ],
                    weights=weights,
                    state=state,
                    averaged_by=by,
                    tree=grown,
                ).value()


# --- name files that hold no digest (or a digest of nothing) --------------------------------


def name_value(store: Store, graph: Graph, name: str) -> str | None:
    """The digest name file `name` provably held, worked out from the records that point at
    it, when exactly one is and its blob is in the store; None otherwise. A meeting's
    `about` is the identity its key hashes (`_abouts`); a client's record is what the
    meeting's average records list as its `record`; `average` the meeting's only published
    averaging; a place's `published` the average record whose inputs hash to the place's
    key; its `claimed`, last `takeover/<g>` and `computed/<who>` the holder the published
    average names (`averaged_by`; `computed/` by its digest's first 16 characters)."""
    m = layout.parse(name)
    if m is None:
        return None
    found = set(_name_candidates(store, graph, m))
    if len(found) != 1:
        return None
    digest = found.pop()
    return digest if digest != graph.names.get(name) and store.has(digest) else None


def _name_candidates(store: Store, graph: Graph, m: layout.RoundName) -> Iterator[str]:
    from soma.round import Input, inputs_key

    prefix, rest = m.prefix, m.rest
    if rest == "about":
        for value in itertools.islice(_abouts(store, graph, m.run, m.round, m.meeting), _MAX_TRIES):
            yield digest_of(value)
    elif m.client is not None:
        yield from _input_records(store, graph, prefix, m.client)
        yield from _release_of(store, graph, prefix, m.client)
    elif (k := layout.release_of(rest)) is not None:  # what the client's record is (claimed first)
        yield from _input_records(store, graph, prefix, k)
        yield from _client_record(store, graph, client_names(prefix, k), k)
    elif m.published == "":  # the meeting's average: its only published averaging
        yield from (graph.names[n] for n in _published(graph, prefix).values())
    elif m.published:
        for average in _meeting_averages(store, graph, prefix):
            try:
                given = [Input(i["client"], i["weights"], i["size"], i.get("extra"))
                         for i in average["inputs"]]  # fmt: skip
            except (KeyError, TypeError):
                continue
            if inputs_key(m.meeting, given) == m.published:
                yield digest_of(average)
    elif node := _TREE_NODE.match(rest):
        for level, index, record in _tree_nodes(store, graph, prefix, node["key"]):
            if (level, index) == (int(node["level"]), int(node["index"])):
                yield digest_of(record)
    elif held := _HOLDER_AT.match(rest):
        yield from _holder_candidates(store, graph, prefix, held["place"], held["tail"])


def _input_records(store: Store, graph: Graph, prefix: str, k: int) -> Iterator[str]:
    """Client k's record as the meeting's average records list it (`record`)."""
    for average in _meeting_averages(store, graph, prefix):
        for given in average["inputs"]:
            if isinstance(given, dict) and given.get("client") == k:
                if isinstance(given.get("record"), str):
                    yield given["record"]


def _client_record(store: Store, graph: Graph, names: list[str], k: int) -> Iterator[str]:
    """The digest one of `names` holds when it is client k's record of what it brought (not
    a drop-out): a distributed-DP release is that record, claimed before it is bound under
    the client's name (soma.round.client._release), so either name says what the other held."""
    for name in names:
        digest = graph.names.get(name)
        if digest is None:
            continue
        try:
            record = records.read_client(store, digest, client=k, name=name)
        except (SomaError, StoreError, OSError):
            continue
        if isinstance(record, records.ClientRecord):
            yield digest


def _release_of(store: Store, graph: Graph, prefix: str, k: int) -> Iterator[str]:
    """Client k's record as its distributed-DP release names it, if it released one."""
    yield from _client_record(store, graph, release_names(prefix, k), k)


def _tree_of(store: Store, meeting: Any, inputs: list) -> dict[str, Any] | None:
    """An average record's `tree` (fan-in, root mean, weight) when its round was averaged
    as a tree (soma.round.verify.uses_tree: more inputs than the fan-in), its nodes put again."""
    from soma.round import tree
    from soma.strategies import uniform

    if meeting.tree is None or len(inputs) <= meeting.tree:
        return None
    leaves = tree.leaves_of(inputs, uniform=uniform(meeting.strategy_object()))
    root = tree.recompute(store, leaves, meeting.tree)
    return {"fan_in": meeting.tree, "mean": root.mean, "weight": root.weight}


_TREE_NODE = re.compile(
    r"^inputs/(?P<key>[0-9a-f]{64})/tree/(?P<level>\d+)/(?P<index>\d+)/published$"
)
# A holder's name at a place (the averaging's, or a tree node's): claimed, takeover, computed.
_HOLDER_AT = re.compile(
    r"^(?P<place>inputs/[0-9a-f]{64}(?:/tree/\d+/\d+)?)/(?P<tail>claimed|takeover/\d+|computed/\w+)$"
)


def _tree_nodes(
    store: Store, graph: Graph, prefix: str, key: str
) -> Iterator[tuple[int, int, dict]]:
    """Every node record of the tree of the averaging at `key` (level, index, record),
    computed again from the inputs its published average names (each node's mean put
    again on the way)."""
    from soma.round import Input, tree
    from soma.strategies import load_strategy, uniform

    average = _record(store, graph, layout.published(layout.averaging(prefix, key)))
    if average is None:
        averages = _meeting_averages(store, graph, prefix)
        average = averages[0] if averages else None
    grown = None if average is None else average.get("tree")
    if not isinstance(grown, dict):
        return
    try:
        strategy = load_strategy(average["strategy"], average.get("options") or {}, trusted=False)
        inputs = [Input(i["client"], i["weights"], i["size"]) for i in average["inputs"]]
        level: list = list(tree.leaves_of(inputs, uniform=uniform(strategy)))
        widths = tree.widths(len(level), tree.check_fan_in(grown["fan_in"]))
        for level_number, width in enumerate(widths, start=1):
            below, level = level, []
            for index in range(width):
                parts = [below[j] for j in tree.children(index, len(below), grown["fan_in"])]
                node = store.recall_digest(tree._fold(store, parts))
                yield level_number, index, node
                level.append(tree.Node(node["mean"], float(node["weight"])))
    except (SomaError, StoreError, OSError, KeyError, TypeError, ValueError):
        return


def _holder_candidates(
    store: Store, graph: Graph, prefix: str, at: str, tail: str
) -> Iterator[str]:
    """Who held the work at place `at` (a holder record's digest), by the name `tail`
    (claimed, takeover/<g>, computed/<who>): the holder an averaging's published average
    names (`averaged_by`), or the place's other holder names: without takeovers the one who
    claimed is the one who computed; the last takeover is the one who computed; `computed/`
    is named by its holder's first 16 characters."""
    place = f"{prefix}/{at}"
    takeovers = _named(graph, layout.takeovers(place))
    computed = [graph.names[n] for n in _named(graph, layout.computed(place))]
    average = _record(store, graph, layout.published(place)) if "/tree/" not in at else None
    by = average.get("averaged_by") if average else None
    did = ([digest_of(by)] if isinstance(by, dict) else []) or computed
    if tail == "claimed":
        if not takeovers:
            yield from did
    elif tail.startswith("takeover/"):
        generations = [n.rsplit("/", 1)[1] for n in takeovers] + [tail.rsplit("/", 1)[1]]
        if tail.rsplit("/", 1)[1] == max(generations, key=int):
            yield from did
    else:
        who = tail.rsplit("/", 1)[1]
        holders = [graph.names.get(layout.claimed(place))]
        holders += [graph.names.get(n) for n in takeovers] + did
        yield from {h for h in holders if isinstance(h, str) and h.startswith(who)}


def finished_node_holder(graph: Graph, name: str) -> bool:
    """Whether `name` only records who held a tree node that is published (claimed,
    takeover/<g>, computed/<who>): a record nobody reads once the node is published (a
    holder is asked after only while its work is pending), so a lost one may go."""
    m = layout.parse(name)
    held = _HOLDER_AT.match(m.rest) if m else None
    if m is None or held is None or "/tree/" not in held["place"]:
        return False
    return layout.published(f"{m.prefix}/{held['place']}") in graph.names
