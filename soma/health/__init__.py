"""A store's health over months of shared use: verify it, repair it, collect its garbage.

    verify(store, run=None, progress=None) -> VerifyReport   what is wrong, with paths
    repair(store, run=None, dry_run=False) -> RepairReport   what can be recomputed, is
    gc(store, keep_runs=None, dry_run=False, min_age=GRACE, force=False) -> GcReport

Pure functions over a `Store`; `soma verify|repair|gc` (soma.cli) print their reports.

What reaches what, and which references a reader needs, is soma.health.reach; what fixes a
damaged blob, soma.health.advice.

verify hashes every blob (or, with `run`, every blob the run's names reach) against its
name, streamed on up to 4 threads at disk speed with `progress(done, total)` in bytes;
checks that every name holds a digest of a blob present and every reference a reader
follows is present; and says, for each problem, the path and what fixes it. A blob found
corrupt is marked (see soma.store, "Health"), so that a put of its bytes replaces it.

repair remakes what the store can remake (soma.health.rebuild), each thing kept only when it
hashes to the digest that was lost: an average's `weights` and `state` (and the tensor
blobs under them), recomputed from the inputs its record names with the record's
strategy, options, start and state, exactly as the round did (`recompute_average`); and a
lost record of a meeting (its identity, an average's record, the averager's holder
record), reassembled from the others. The only names it binds are name files that hold no
digest (or the digest of no blob), bound again to the digest the records that point at them
prove they held (soma.health.rebuild.name_value); the only names it removes record who held
a tree node already published, their record lost (nobody reads it). A client's export cannot be
remade from the store: the report names the Snakemake target or the `soma client` command
whose rerun trains it again (training is seeded, so the rerun writes the same bytes, and a
put replaces a marked or missing blob). What cannot be remade or rerun (a name file that
holds no digest, a client's own record) is said with the file to restore from a backup. A
corrupt blob nothing needs (no name reaches it, or only a record's note does) is removed.

gc removes blobs no name reaches, temporaries left by killed writers, and (`keep_runs`)
every name of the runs not kept. Decisions, and the guarantee they give:

- Grace: a blob is removed only if unreachable *and* untouched for `min_age` seconds
  (default `GRACE`, 1 h). A writer puts blobs and then binds a name; between the two they
  are unreachable. A put of a blob already there refreshes its mtime (soma.store,
  `REFRESH_AFTER`), so a blob a process put (or re-put) stays for at least `min_age` minus
  `REFRESH_AFTER` after the put, reachable or not. soma holds no digest unbound for long:
  a run's start weights are claimed under `<run>/starts/<weights>` (soma.round.layout) the
  moment they are made, in every mode, and a waiting averager re-puts its holder record at
  every holder check (a tree's builder at every level); what is left unbound is a put and
  its bind, seconds apart. So the grace was shortened from 24 h to 1 h, which is margin for
  a writer stalled between the two. `gc` (the library, and so `soma gc`) refuses a
  `min_age` below `MIN_AGE`, twice `REFRESH_AFTER` (2 min), within which a put does not
  refresh a blob: no caller can ask it to remove a blob just put, or a live writer's
  temporary.
- Symbolic links: the store makes none and follows none (soma.store); `verify` reports each
  one anywhere under the store (kind `symlink`, its path), and `gc` refuses to run, before
  removing anything, while one is there: it could delete through it (`tmp/` a link), or
  miss the names behind it (`names/<run>` a link) and collect a live run's blobs.
- The race: gc decides from a stat, a writer's put may land between that stat and the
  deletion, and the put (one stat and a utime) then believes a blob that is about to go.
  So gc never unlinks a blob in place: it renames it to `attic/<digest>`, stats it there,
  and puts it back if it was touched after the listing; only then unlinks it. A put that
  touched it before the rename made it fresh (it goes back); one after the rename finds
  no file and links it back from `attic/` itself, or writes it anew if it is gone. Every
  read that misses a blob also looks in `attic/`, so the instant a blob spends there is
  invisible to the store's readers. (A caller testing `blob_path(d).exists()` directly,
  outside the store, could see that instant; `Store.has` cannot.)
- What gc cannot know, it keeps: when a name file holds no digest, or a record reached
  from a name is corrupt, what they reach is unknown, so gc removes no blob at all (only
  temporaries) and says which; `soma repair` first. (A reachable record larger than
  `soma.health.reach.RECORD_LIMIT` whose first bytes were damaged would pass for raw bytes.)
- Temporaries (`tmp/<host>.<pid>.<tid>.<random>.<what>`): removed when untouched for
  `min_age`, or when their writer is provably gone (this host, its pid not running) and
  untouched for `DEAD_WRITER_AGE` (a live writer touches its temporary at every write).
  A temporary from another host is only ever aged out.
- `keep_runs`: the names of every run not listed are removed first (a run is a name's
  part before `/round/<r>/`, or before `/start` or `/evaluation/`); names of no run are
  always kept, and a listed run the store does not hold is refused (a typo would drop
  everything). A run to drop that has an open round (a meeting with no average published,
  or no meeting yet beside its start) is refused unless `force`, naming it: it may still
  be going (`soma client` and `soma simulate` announce each round as it begins, the
  workflow's train jobs mark it started, so a round in training is open). Dropping a run
  that is still being written (`force`) loses what it binds before the drop; what it
  binds afterwards stays.
- Folders are never removed (a writer may be about to link into one).
- Readers: on a local filesystem an unlinked blob stays readable through open files and
  maps. Over NFS a file deleted on the server while another machine maps it lazily
  (`recall(lazy=True)`) raises SIGBUS at the next evicted page: gc deletes only
  unreachable blobs, but a run still being read should not be dropped by `keep_runs`, and
  a reader that resolved a name which is then rebound, and reads it only after a gc, may
  find its blobs gone if they were last put more than `min_age` ago.
- Another user's blob cannot be refreshed by a put (utime needs its owner): in a store
  shared by several users, such a blob ages from its owner's last write.
- A bucket (soma.store.s3) gives the same guarantees with its own refresh-vs-delete
  protocol (a put's refresh writes a marker, then copies the blob onto itself; gc deletes
  through an attic and looks for the marker after the delete: see soma.store.s3_gc), and
  every age is judged by the SERVER's clock: the cutoff is the server's time (the Date of
  its answer, taken before the names are read) minus `min_age`, against each object's
  LastModified, so sites whose clocks differ agree, and no local clock matters. Its
  temporaries are multipart uploads: those not written since the cutoff (their last part,
  else their start) are aborted (`uploads_aborted`); a killed gc's attic copies are put
  back (`restored`).
  `keep_runs`, `force`, `dry_run` and the floor are the folder's.
"""

from __future__ import annotations

# Every name importable from soma.health before it was split into modules still is: those of
# `__all__`, and (as `x as x`, an explicit re-export) the others, from where they live. The
# private helpers are not: patch or import them in their module (e.g. soma.health.collecting).
from soma.errors import SomaError as SomaError
from soma.health import advice as advice
from soma.health import reach as reach
from soma.health import rebuild as rebuild
from soma.health.advice import Advisor as Advisor
from soma.health.advice import average_text as average_text
from soma.health.collecting import DEAD_WRITER_AGE as DEAD_WRITER_AGE
from soma.health.collecting import GRACE, MIN_AGE, GcReport, gc
from soma.health.common import HealthError
from soma.health.reach import Graph as Graph
from soma.health.reach import files as files
from soma.health.reach import is_digest as is_digest
from soma.health.reach import list_blobs as list_blobs
from soma.health.reach import resolve_names as resolve_names
from soma.health.reach import symlinks as symlinks
from soma.health.reach import walk as walk
from soma.health.rebuild import finished_node_holder as finished_node_holder
from soma.health.rebuild import name_value as name_value
from soma.health.rebuild import rebuild_record as rebuild_record
from soma.health.rebuild import recompute_average
from soma.health.repairing import RepairReport, repair
from soma.health.verifying import Problem, VerifyReport, verify
from soma.round import holders as holders
from soma.round import layout as layout
from soma.round.layout import run_of as run_of
from soma.store import REFRESH_AFTER as REFRESH_AFTER
from soma.store import Store as Store
from soma.store import hash_stream as hash_stream
from soma.store import mark_corrupt as mark_corrupt
from soma.store.backend import BackendStore as BackendStore
from soma.store.errors import BadBlob as BadBlob
from soma.store.errors import StoreError as StoreError
from soma.store.errors import SymlinkInStore as SymlinkInStore
from soma.store.errors import UnknownDigest as UnknownDigest

__all__ = [
    "GRACE",
    "MIN_AGE",
    "GcReport",
    "HealthError",
    "Problem",
    "RepairReport",
    "VerifyReport",
    "gc",
    "recompute_average",
    "repair",
    "verify",
]
