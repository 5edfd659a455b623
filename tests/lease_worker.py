"""An averaging process for the lease trials (tests/round/test_lease_s3.py), the test's mutant (if
any) applied first. Its averaging says when it starts (a line `{"computing": pid}`), then
works for `--hold` seconds of its own running time (steps of 0.1 s: a process stopped
mid-way still has the rest to do when it wakes) before it computes the mean. It begins
once told to (a line on its stdin), so that its imports are done before; with `--gate`, its
averaging waits for another line after its hold. After its first turn that computed (its
publish done, or refused), it says so (`{"turned": pid}`). Each renewal of its lease says
whether it renewed (`{"renewed": true|false}`: false once a successor holds it). With
`--roster` and `--keys` its meeting is signed (soma.round.signing), and it signs with the
first roster key it holds."""

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mutants  # noqa: E402

mutants.apply_from_environment()

import soma.round  # noqa: E402
import soma.round.lease  # noqa: E402
import soma.round.once  # noqa: E402
from soma.round import Backoff, Meeting, average_round  # noqa: E402
from soma.store import Store  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--store", required=True)
parser.add_argument("--run", required=True)
parser.add_argument("--clients", type=int, default=2)
parser.add_argument("--lease", type=float, required=True)
parser.add_argument("--hold", type=float, default=0.0)
parser.add_argument("--deadline", type=float, default=60.0)
parser.add_argument("--gate", action="store_true")
parser.add_argument("--roster")
parser.add_argument("--keys")
args = parser.parse_args()

real = soma.round._Averaging.compute
real_turn = soma.round.once._leased
real_renew = soma.round.lease.Lease.renew
computed: list[int] = []
saying = threading.Lock()  # lines come from the main thread and the lease's renewals


def say(line: dict) -> None:
    with saying:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def compute(self, inputs, me):  # noqa: ANN001, ANN202
    computed.append(1)
    say({"computing": os.getpid()})
    for _ in range(round(args.hold * 10)):
        time.sleep(0.1)
    if args.gate:
        sys.stdin.readline()
    return real(self, inputs, me)


def turn(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    result = real_turn(*args, **kwargs)
    if computed and len(computed) < 2:
        computed.append(2)
        say({"turned": os.getpid()})
    return result


def renew(self):  # noqa: ANN001, ANN202
    renewed = real_renew(self)
    say({"renewed": renewed})
    return renewed


soma.round._Averaging.compute = compute
soma.round.once._leased = turn
soma.round.lease.Lease.renew = renew
sys.stdin.readline()
signing = None
if args.roster:
    from soma.round.signing import Signing, read_roster

    signing = Signing.of(read_roster(args.roster), args.keys)
meeting = Meeting(args.run, 0, args.clients, signing=signing)
digest = average_round(
    Store(args.store),
    meeting,
    deadline=args.deadline,
    backoff=Backoff(first=0.01, cap=0.1),
    lease=args.lease,
)
say({"average": digest})
