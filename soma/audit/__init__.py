"""`soma audit`: a run checked round by round from its store alone, by anyone who can read it.

Read-only (it never binds, claims, puts or forgets anything). Per round it checks that every
blob of every contribution hashes to its digest, that every record is signed by whom it must
be (a client record by its client, an average by a roster member), that the average is what
its inputs make (recomputed, soma.round.verify), that the round starts from the round before's
average, that its sample is the one the run's public seed draws, that a DP run's epsilon is
the accountant's over the rounds, and that every client left out as dropped out signed its own
drop-out. The modules, one job each: `findings` (what was found), `blobs`, `roster` (which
roster, and how far it is trusted), `rounds` (one meeting's checks), `across` (the chain and
the ledger), `run` (the whole run), and the outputs `text`, `prov` (W3C PROV-JSON) and
`crate` (an RO-Crate).
"""

from __future__ import annotations

from soma.audit.findings import AuditFailed, AuditReport, Finding, RoundAudit
from soma.audit.prov import document
from soma.audit.run import audit
from soma.audit.text import lines

__all__ = ["AuditFailed", "AuditReport", "Finding", "RoundAudit", "audit", "document", "lines"]
