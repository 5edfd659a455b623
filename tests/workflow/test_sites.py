"""One run across institutions: sites (config `site`, `sites`), each a snakemake in its own
working folder hosting some of the clients, meeting through one bucket (README.md, "Across
institutions"); `soma client` processes on a bucket; a site forging another's client."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")

from helpers import communicated
from s3_bucket import BUCKET  # noqa: E402

from soma.cli import main  # noqa: E402
from soma.config.configs import ConfigRefused  # noqa: E402
from soma.config.identity import declared  # noqa: E402
from soma.config.spec import RunSpec  # noqa: E402
from soma.run.simulate import simulate  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.timing import LEASE  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# every process a test starts applies SOMA_MUTANT too (tests/inherited/sitecustomize.py)
INHERITED = TESTS / "inherited"
CLIENTS, ROUNDS, EXAMPLES = 4, 2, 64
SITES = {"A": "0-1", "B": "2-3"}
_PREFIXES = itertools.count()


def prefix(what: str) -> str:
    return f"s3://{BUCKET}/sites-{what}-{os.getpid()}-{next(_PREFIXES)}"


def config(store: str, **more) -> dict:
    return {
        "run": "sites", "store": store, "rounds": ROUNDS, "clients": CLIENTS, "seed": 0,
        "task": "soma.tasks.control",
        "task_options": {"soma.tasks.control": {"examples": EXAMPLES, "epochs": 1}},
        "strategy": "fedavg", "strategy_options": {}, "threads": 1, "average_deadline": 120,
        "metric": "loss", "baselines": {"alone": False, "centralized": False},
        "clients_per_job": 2, "sites": SITES, **more,
    }  # fmt: skip


def env() -> dict[str, str]:
    path = [str(INHERITED), str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p), OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def one_site(tmp_path_factory) -> list[str]:
    """Each round's average weights of the same run hosted whole in one place (a folder)."""
    done = simulate(
        "soma.tasks.control", clients=CLIENTS, rounds=ROUNDS, seed=0,
        task_options={"examples": EXAMPLES, "epochs": 1},
        store=tmp_path_factory.mktemp("one-site") / "store",
    )  # fmt: skip
    return [r.record["weights"] for r in done.rounds]


def waited_for(log: Path, process: subprocess.Popen, seconds: float = 240) -> None:
    """Until the job's `log` says it waits (or its snakemake ended, or `seconds` passed)."""
    until = time.monotonic() + seconds
    while not (log.exists() and "waited" in log.read_text()) and process.poll() is None:
        assert time.monotonic() < until, f"{log} never said it waits"
        time.sleep(0.2)


def averagings_per_round(store: Store, run: str) -> dict[int, int]:
    """How many averagings were computed in each round, from the store's own records."""
    counts: dict[int, int] = {}
    for name in store.bound(f"{run}/round/"):
        if "/computed/" in name:
            r = int(name.split("/")[2])
            counts[r] = counts.get(r, 0) + 1
    return counts


# --- the config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, said",
    [
        ({"site": "C"}, "config key `site`: 'C' is not one of the sites 'A', 'B'"),
        ({"sites": {"A": "0-1", "B": "3"}}, "config key `sites`: clients 2 of the run's 4"),
        ({"sites": {"A": "0-2", "B": "2-3"}}, "config key `sites`: client 2 is in both site"),
        ({"sites": {"A": "0-1", "B": "2-9"}}, "config key `sites`: site 'B' names client 4"),
        ({"sites": {"A": "0-1", "B": "two"}}, "config key `sites`: site 'B': 'two' is not"),
        ({"site": "A", "sites": None}, "config keys `site`/`sites`: site 'A' given without"),
        ({"site": "A", "secure_aggregation": {"threshold": 3}, "clients_per_job": 1},
         "config keys `secure_aggregation`/`sites`: the workflow's secure rounds"),
    ],
)  # fmt: skip
def test_sites_that_cannot_work_are_refused_naming_the_key(given: dict, said: str) -> None:
    with pytest.raises(ConfigRefused) as refused:
        RunSpec.from_config(config("store", **given)).check()
    assert said in str(refused.value)


def test_a_site_is_not_part_of_what_the_run_is_so_sites_meet_in_the_same_rounds() -> None:
    specs = [RunSpec.from_config(config("store", site=s)) for s in (None, "A", "B")]
    assert [s.check().hosted for s in specs] == [None, [0, 1], [2, 3]]
    keys = {s.meeting(1, "ab" * 32, None).key for s in specs}
    assert len(keys) == 1, "one meeting of the round, whichever site asks"
    assert declared(config("store", site="A")) == declared(config("store", sites=None))


def test_a_sites_average_job_averages_the_whole_round_not_only_its_own_clients(
    tmp_path: Path,
) -> None:
    """A site's receipts name only its own clients; its average job must average the round as
    the store has it (every site's clients), or each site would average its own clients alone
    and the sites would part ways. In one process, on a folder: the two-site snakemakes below
    show the same end to end."""
    import torch

    from soma.round import Input, contribute
    from soma.round.records import read_average
    from soma.workflow.averaging import averaged

    store = Store(tmp_path / "store")
    spec = RunSpec.from_config(config(str(tmp_path / "store"), site="A"))
    spec.check()
    meeting = spec.meeting(0, None, None)
    given = {}
    for k in range(CLIENTS):  # every site's clients came: A's 0, 1 and B's 2, 3
        export = {"fc": {"w": torch.full((3,), float(k))}}
        given[k] = contribute(store, meeting, export, mine=k, size=1.0)
    mine = [Input(k, given[k].weights, 1.0) for k in spec.check().hosted]  # A's receipts
    record = read_average(store, averaged(store, meeting, spec, mine))
    assert [i["client"] for i in record.inputs] == [0, 1, 2, 3], "only this site's clients"


# --- two sites, one bucket -----------------------------------------------------------------


def test_two_sites_on_one_bucket_reach_the_bits_of_one_site_averaging_each_round_once(
    bucket: str, tmp_path: Path, one_site: list[str], capsys
) -> None:
    """Site B starts once site A's log says it waits for B's clients; each round's log at
    one site says it computed the average here, at the other that it took that site's, and
    `soma status` names that site."""
    store = prefix("workflow")
    folders = {site: tmp_path / site for site in SITES}
    processes = {}
    for site, folder in folders.items():
        folder.mkdir()
        (folder / "config.yaml").write_text(json.dumps(config(store, site=site)))
        command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
        command += ["-d", str(folder), "--configfile", str(folder / "config.yaml"), "--cores", "1"]
        command.append(f"results/sites/round/{ROUNDS - 1}/evaluation.json")  # not the summary
        processes[site] = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env()
        )  # each site's averages wait for the other's clients
        if site == "A":  # B starts once A says it waits for B's clients
            waited_for(folders["A"] / "logs/sites/round/0/round.log", processes["A"])
    outputs = communicated(list(processes.values()), 300)
    for (site, process), (out, _) in zip(processes.items(), outputs, strict=True):
        assert process.returncode == 0, f"site {site}:\n{out[-4000:]}"
    logs = {s: [(f / f"logs/sites/round/{r}/round.log").read_text() for r in range(ROUNDS)]
            for s, f in folders.items()}  # fmt: skip
    waited = [x for x in logs["A"][0].splitlines() if "waited" in x]
    assert waited and all(
        x.endswith("for clients 2, 3 at site B (quorum 4 of 4, 2 came)") for x in waited
    ), logs["A"][0]
    assert main(["status", "--store", store, "--run", "sites"]) == 0
    status = capsys.readouterr().out.splitlines()
    for r in range(ROUNDS):  # one site computed the round's average, the other took it
        (here,) = [s for s in SITES if f"computed the average here (site {s}, " in logs[s][r]]
        (there,) = set(SITES) - {here}
        took = f"round {r} of run 'sites': took the average computed by site {here} ("
        assert took in logs[there][r], logs[there][r]
        assert f" by site {here}" in status[r] and status[r].startswith(f"round {r:>4}"), status
    for site, folder in folders.items():
        rounds = folder / "results" / "sites" / "round"
        for r in range(ROUNDS):  # a job a round: its own clients trained, the round averaged
            trained = json.loads((rounds / f"{r}/batch/0.json").read_text())["clients"]
            assert [c["client"] for c in trained] == RunSpec.from_config(
                config(store, site=site)
            ).hosted, site
        averages = [json.loads((rounds / f"{r}/average.json").read_text()) for r in range(ROUNDS)]
        assert [a["weights"] for a in averages] == one_site, f"site {site}: not one site's bits"
        assert all([i["client"] for i in a["inputs"]] == [0, 1, 2, 3] for a in averages)
    assert averagings_per_round(Store(store), "sites") == {r: 1 for r in range(ROUNDS)}


def test_soma_client_processes_on_a_bucket_each_hosting_some_clients(
    bucket: str, one_site: list[str]
) -> None:
    store = prefix("client")
    command = [sys.executable, "-m", "soma.cli", "client", "--store", store, "--run", "sites"]
    command += ["--rounds", str(ROUNDS), "--clients", str(CLIENTS), "--task", "soma.tasks.control"]
    command += ["--option", f"examples={EXAMPLES}", "--option", "epochs=1"]
    processes = [
        subprocess.Popen([*command, "--mine", mine], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env())
        for mine in SITES.values()
    ]  # fmt: skip
    for process, (out, err) in zip(processes, communicated(processes, 300), strict=True):
        assert process.returncode == 0, err[-4000:]
        lines = [json.loads(line) for line in out.splitlines() if '"round"' in line]
        assert [line["weights"] for line in lines] == one_site
    assert averagings_per_round(Store(store), "sites") == {r: 1 for r in range(ROUNDS)}


# --- a site forging another site's client --------------------------------------------------


@pytest.mark.parametrize("how", ["signed with its own client's key", "unsigned"])
def test_a_site_writing_as_another_sites_client_is_refused_naming_the_client(
    bucket: str, tmp_path: Path, how: str
) -> None:
    pytest.importorskip("cryptography")
    import torch

    from soma.round import Meeting, average_round, contribute
    from soma.round import signing as signatures
    from soma.round.signing import Signing, SigningError, make_keys

    roster = {}
    for site, clients in (("A", [0, 1]), ("B", [2, 3])):  # each site holds its own keys only
        for k in clients:
            roster[k] = make_keys(tmp_path / site, k)[1]
    at = {site: Signing.of(roster, str(tmp_path / site / "{client}.key")) for site in "AB"}
    store = Store(prefix("forged"))
    meeting = {site: Meeting("forged", 0, CLIENTS, signing=at[site]) for site in "AB"}
    assert meeting["A"].key == meeting["B"].key, "one meeting, whichever site asks"

    def export(x: float) -> dict:
        return {"fc": {"w": torch.full((3,), x)}}

    contribute(store, meeting["A"], export(1.0), mine=1, size=1.0)
    for k in (2, 3):
        contribute(store, meeting["B"], export(float(k)), mine=k, size=1.0)
    # site B writes client 0's record (site A's client) on the bucket
    forged = {"client": 0, "size": 1.0, "weights": store.put_value(export(99.0)),
              "extra": None, "own": None, "by": None}  # fmt: skip
    name = meeting["B"].client(0)
    if how == "unsigned":
        store.keep(name, forged)
    else:
        mine = Signing.of({0: roster[2]}, str(tmp_path / "B" / "2.key"))
        signatures.keep(store, mine, forged, name=name, by=0)
    for site in "AB":
        with pytest.raises(SigningError) as refused:
            average_round(store, meeting[site], deadline=5, lease=LEASE)
        assert "client 0's record" in str(refused.value), site
    assert store.resolve(meeting["A"].average) is None, "refused before anything was averaged"
