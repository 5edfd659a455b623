"""`soma keys merge` (soma.round.signing.merge_rosters): each site makes its own clients' keys
(`soma keys`), and their public rosters become the one roster every site runs with; a client
with two keys, a key of two clients or a file that is no roster is refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from helpers import communicated

from soma.cli import main  # noqa: E402
from soma.round.signing import SigningError, merge_rosters, read_roster  # noqa: E402
from soma.run.simulate import simulate  # noqa: E402

SITES = {"A": "0-1", "B": "2-3"}


def site_rosters(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    """Each site's `soma keys --out keys-<site> --client <its clients> > roster-<site>.json`."""
    rosters = {}
    for site, clients in SITES.items():
        assert main(["keys", "--out", str(folder / f"keys-{site}"), "--client", clients]) == 0
        rosters[site] = folder / f"roster-{site}.json"
        rosters[site].write_text(capsys.readouterr().out)
    return rosters


def merged(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`soma keys merge PATHS`: its exit status, stdout and stderr."""
    status = main(["keys", "merge", *map(str, paths)])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_sites_rosters_merge_into_one_naming_every_client_once(tmp_path, capsys) -> None:
    rosters = site_rosters(tmp_path, capsys)
    status, out, _ = merged([rosters["A"], rosters["B"]], capsys)
    assert status == 0
    both = json.loads(out)
    assert list(both) == ["0", "1", "2", "3"]
    for site, clients in (("A", "01"), ("B", "23")):
        for k in clients:  # each key is the one its site made, as its .pub says
            assert both[k] == (tmp_path / f"keys-{site}" / f"{k}.pub").read_text().strip()
    again = tmp_path / "roster.json"
    again.write_text(out)
    assert merged([again, rosters["B"]], capsys)[1] == out, "a client named twice, one key: once"
    assert main(["keys", "merge", str(rosters["A"]), str(rosters["B"]), "-o", str(again)]) == 0
    assert read_roster(again) == {int(k): v for k, v in both.items()}


def test_a_client_with_two_keys_is_refused_naming_it_and_both_files(tmp_path, capsys) -> None:
    rosters = site_rosters(tmp_path, capsys)
    assert main(["keys", "--out", str(tmp_path / "keys-C"), "--client", "1"]) == 0
    rosters["C"] = tmp_path / "roster-C.json"  # site C made client 1's keys too
    rosters["C"].write_text(capsys.readouterr().out)
    output = tmp_path / "roster.json"
    status = main(["keys", "merge", *map(str, rosters.values()), "-o", str(output)])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1, err
    assert "client 1 has key" in err and str(rosters["A"]) in err and str(rosters["C"]) in err
    assert not output.exists(), "refused before anything was written"


def test_a_key_of_two_clients_is_refused_naming_both_and_both_files(tmp_path, capsys) -> None:
    rosters = site_rosters(tmp_path, capsys)
    copied = json.loads(rosters["B"].read_text())
    copied["2"] = json.loads(rosters["A"].read_text())["0"]  # site B lists client 0's key as 2's
    rosters["B"].write_text(json.dumps(copied))
    with pytest.raises(SigningError) as refused:
        merge_rosters([rosters["A"], rosters["B"]])
    said = str(refused.value)
    assert "client 0's" in said and "client 2's" in said
    assert str(rosters["A"]) in said and str(rosters["B"]) in said


@pytest.mark.parametrize(
    "content",
    ['{"0": "not a key"}', "[1, 2]", "{not json", '{"zero": "' + "a" * 64 + '"}', ""],
)
def test_a_file_that_is_no_roster_is_refused_naming_it(tmp_path, capsys, content: str) -> None:
    rosters = site_rosters(tmp_path, capsys)
    bad = tmp_path / "roster-bad.json"
    bad.write_text(content)
    status, out, err = merged([rosters["A"], bad], capsys)
    assert status == 1 and not out, "nothing printed: a refusal is not half a roster"
    assert err.startswith("soma: ") and str(bad) in err and err.count("\n") == 1, err
    status, _, err = merged([rosters["A"], tmp_path / "missing.json"], capsys)
    assert status == 1 and "missing.json" in err


def test_keys_and_merge_say_how_each_is_called(tmp_path, capsys) -> None:
    assert main(["keys", "--out", str(tmp_path / "k")]) == 1
    assert "--client" in capsys.readouterr().err
    assert main(["keys", "--out", str(tmp_path / "k"), "merge", str(tmp_path / "r.json")]) == 1
    assert "not --out or --client" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


@pytest.mark.slow
def test_two_sites_keys_merged_sign_a_run_that_ends_with_the_bits_of_one_site(
    tmp_path, capsys
) -> None:
    """The round trip: keys made per site, the rosters merged, one `soma client` process a
    site holding its own keys only, on one store: every record signed, the weights an
    unsigned one-site run's."""
    rosters = site_rosters(tmp_path, capsys)
    roster = tmp_path / "roster.json"
    assert main(["keys", "merge", str(rosters["A"]), str(rosters["B"]), "-o", str(roster)]) == 0
    store = tmp_path / "store"
    run = ["--run", "r", "--rounds", "2", "--clients", "4", "--option", "examples=32"]
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(store), *run]
    command += ["--roster", str(roster)]
    sites = [
        subprocess.Popen(
            [*command, "--mine", clients, "--keys", str(tmp_path / f"keys-{site}/{{client}}.key")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for site, clients in SITES.items()
    ]  # fmt: skip
    lines = []
    for process, (out, err) in zip(sites, communicated(sites, 300), strict=True):
        assert process.returncode == 0, err[-3000:]
        lines.append([json.loads(line) for line in out.splitlines() if '"round"' in line])
    one = simulate("soma.tasks.control", clients=4, rounds=2, task_options={"examples": 32})
    expected = [r.record["weights"] for r in one.rounds]
    assert [[line["weights"] for line in said] for said in lines] == [expected, expected]
    capsys.readouterr()
    assert main(["audit", "--store", str(store), "--run", "r", "--roster", str(roster)]) == 0
