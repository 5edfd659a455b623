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
Input), `signed` (records checked against the run's roster), `roll` (who came), `checks`
(what is refused before anything is claimed), `client` (contribute, drop), `apart`
(meetings of one round that differ), `average` (the averaging) and `report` (what
`soma status` shows); beneath them `layout`, `records`, `once`, `lease`, `holders`,
`waiting` (what a waiting process says), `signing` and `tree`. This module only re-exports
their names.
"""

# Re-exports only: every name soma.round offered before its split stays importable from it.
# ruff: noqa: F401

from __future__ import annotations

from soma.round import holders, layout, once, records, tree
from soma.round import signing as signatures
from soma.round.apart import (
    ELSEWHERE_EVERY,
    STARTING_POINT,
    MeetingsDiffer,
    _Elsewhere,
    labels,
    meeting_differences,
    said_apart,
    settings,
)
from soma.round.average import (
    _Averaging,
    average_inputs,
    average_round,
    inputs_key,
    weights_of_average,
)
from soma.round.checks import (
    Refused,
    check_input,
    check_inputs,
    signature,
    tree_refusal,
)
from soma.round.client import (
    Contradicts,
    Contribution,
    announce,
    contribute,
    drop,
    dropout_reason,
)
from soma.round.meeting import Input, Meeting
from soma.round.once import (
    POLL,
    AveragerDied,
    Backoff,
    Place,
    RoundError,
    RoundIncomplete,
    current_holder,
    read_record,
)
from soma.round.report import (
    UnknownRun,
    check_run,
    evaluation_name,
    meetings,
    privacy_spent,
    runs,
    status,
)
from soma.round.roll import arrivals, present
from soma.round.signed import averager, check_average, check_signed, check_signed_inputs
from soma.round.tree import check_fan_in
from soma.timing import LEASE

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
