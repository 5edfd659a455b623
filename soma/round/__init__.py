"""A federated round on a shared folder, with nobody in charge: the layout, contribute, average.

A round is remembered by what went into it. Its clients meet under a name keyed by the
weights they started from and the run's identity (the client count, the strategy, its
options and its state, and whatever else the caller declares the run to be: task, options,
seed), so two runs that share a name but not their inputs never meet, and never hand each
other an answer. A client waiting for another that joined a different meeting of its run and
round (other settings) is told at once, naming the settings that differ (`MeetingsDiffer`);
`soma status` labels a round's meetings by them (`labels`). The averaging lives under the
digest of exactly what the clients brought:

    <run>/round/<r>/<meeting>/about           the meeting's identity (claimed once)
    <run>/round/<r>/<meeting>/client/<k>      what client k brought: weights, size, extra
                                              (client/<k // 1000>/<k> beyond 1,000 clients)
    <run>/round/<r>/<meeting>/inputs/<key>/   one averaging of these inputs (soma.round.once)
    <run>/round/<r>/<meeting>/average         the meeting's average (claimed: the first one)

Both modes use this one layout (spelled and parsed by soma.round.layout alone, its records typed
by soma.round.records). `average_round` (under soma.gather, the same call on every client, and
`soma client` under srun) averages whoever's records are there once all are; the workflow's
averaging job averages exactly the inputs its client jobs reported (`average_inputs`). A round
rerun with different weights is a different averaging; one with the same weights finds the
average it already had. Weights and strategy states are values of their own in the store
(`Store.put_value`), and records name them by digest, so a record is a few hundred bytes
of JSON that a waiting client reads without touching a tensor.

The package, one job a module, each importing only those before it: `meeting` (Meeting,
Input), `signed` (records checked against the run's roster), `quorum` (who came), `checks`
(what is refused before anything is claimed), `client` (contribute, drop), `conflicts`
(meetings of one round that differ), `average` (the averaging) and `report` (what
`soma status` shows); beneath them `layout`, `records`, `once`, `lease`, `holders`,
`waiting` (what a waiting process says), `signing` and `tree`. This module only re-exports
their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from soma.lazy import lazy

# Every name soma.round offered before its split stays importable from it, imported on first
# use (PEP 562): `import soma.round.signing` (soma keys, soma status) then imports no torch.
_LAZY = {
    "ELSEWHERE_EVERY": "soma.round.conflicts",
    "STARTING_POINT": "soma.round.conflicts",
    "MeetingsDiffer": "soma.round.conflicts",
    "_Elsewhere": "soma.round.conflicts",
    "labels": "soma.round.conflicts",
    "meeting_differences": "soma.round.conflicts",
    "said_apart": "soma.round.conflicts",
    "settings": "soma.round.conflicts",
    "_Averaging": "soma.round.average",
    "average_inputs": "soma.round.average",
    "average_round": "soma.round.average",
    "inputs_key": "soma.round.average",
    "weights_of_average": "soma.round.average",
    "Refused": "soma.round.checks",
    "check_input": "soma.round.checks",
    "check_inputs": "soma.round.checks",
    "signature": "soma.round.checks",
    "tree_refusal": "soma.round.checks",
    "Contradicts": "soma.round.client",
    "Contribution": "soma.round.client",
    "announce": "soma.round.client",
    "contribute": "soma.round.client",
    "drop": "soma.round.client",
    "dropout_reason": "soma.round.client",
    "Input": "soma.round.meeting",
    "Meeting": "soma.round.meeting",
    "POLL": "soma.round.once",
    "AveragerDied": "soma.round.once",
    "Backoff": "soma.round.once",
    "Place": "soma.round.once",
    "RoundError": "soma.round.once",
    "RoundIncomplete": "soma.round.once",
    "current_holder": "soma.round.once",
    "read_record": "soma.round.once",
    "UnknownRun": "soma.round.report",
    "check_run": "soma.round.report",
    "evaluation_name": "soma.round.report",
    "meetings": "soma.round.report",
    "privacy_spent": "soma.round.report",
    "runs": "soma.round.report",
    "status": "soma.round.report",
    "arrivals": "soma.round.quorum",
    "present": "soma.round.quorum",
    "averager": "soma.round.signed",
    "check_average": "soma.round.signed",
    "check_signed": "soma.round.signed",
    "check_signed_inputs": "soma.round.signed",
    "check_fan_in": "soma.round.tree",
    "LEASE": "soma.timing",
}
# Submodules under another name
_ALIASES = {
    "signatures": ("soma.round.signing", None),
}

__all__ = [
    "AveragerDied",
    "Backoff",
    "Input",
    "Meeting",
    "MeetingsDiffer",
    "RoundError",
    "RoundIncomplete",
    "average_inputs",
    "average_round",
    "contribute",
    "read_record",
    "status",
    "weights_of_average",
]


__getattr__, __dir__ = lazy(__name__, {**_LAZY, **_ALIASES}, globals())


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from soma.round import holders as holders
    from soma.round import layout as layout
    from soma.round import once as once
    from soma.round import records as records
    from soma.round import signing as signatures  # noqa: F401
    from soma.round import tree as tree
    from soma.round.average import _Averaging as _Averaging
    from soma.round.average import average_inputs as average_inputs
    from soma.round.average import average_round as average_round
    from soma.round.average import inputs_key as inputs_key
    from soma.round.average import weights_of_average as weights_of_average
    from soma.round.checks import Refused as Refused
    from soma.round.checks import check_input as check_input
    from soma.round.checks import check_inputs as check_inputs
    from soma.round.checks import signature as signature
    from soma.round.checks import tree_refusal as tree_refusal
    from soma.round.client import Contradicts as Contradicts
    from soma.round.client import Contribution as Contribution
    from soma.round.client import announce as announce
    from soma.round.client import contribute as contribute
    from soma.round.client import drop as drop
    from soma.round.client import dropout_reason as dropout_reason
    from soma.round.conflicts import ELSEWHERE_EVERY as ELSEWHERE_EVERY
    from soma.round.conflicts import STARTING_POINT as STARTING_POINT
    from soma.round.conflicts import MeetingsDiffer as MeetingsDiffer
    from soma.round.conflicts import _Elsewhere as _Elsewhere
    from soma.round.conflicts import labels as labels
    from soma.round.conflicts import meeting_differences as meeting_differences
    from soma.round.conflicts import said_apart as said_apart
    from soma.round.conflicts import settings as settings
    from soma.round.meeting import Input as Input
    from soma.round.meeting import Meeting as Meeting
    from soma.round.once import POLL as POLL
    from soma.round.once import AveragerDied as AveragerDied
    from soma.round.once import Backoff as Backoff
    from soma.round.once import Place as Place
    from soma.round.once import RoundError as RoundError
    from soma.round.once import RoundIncomplete as RoundIncomplete
    from soma.round.once import current_holder as current_holder
    from soma.round.once import read_record as read_record
    from soma.round.quorum import arrivals as arrivals
    from soma.round.quorum import present as present
    from soma.round.report import UnknownRun as UnknownRun
    from soma.round.report import check_run as check_run
    from soma.round.report import evaluation_name as evaluation_name
    from soma.round.report import meetings as meetings
    from soma.round.report import privacy_spent as privacy_spent
    from soma.round.report import runs as runs
    from soma.round.report import status as status
    from soma.round.signed import averager as averager
    from soma.round.signed import check_average as check_average
    from soma.round.signed import check_signed as check_signed
    from soma.round.signed import check_signed_inputs as check_signed_inputs
    from soma.round.tree import check_fan_in as check_fan_in
    from soma.timing import LEASE as LEASE
