"""Secure aggregation's secrets and threshold against whom they must hold (issue 19, items 3-5).

- the threshold: at or below half a round's clients, and a process hosting at least the
  threshold of them (but not all), are refused before anything is written, naming the option;
- a client masks once: a rerun of its train job writes nothing masked again, so the store
  never holds two inputs under one mask (their difference would be in clear);
- each client's secrets live in a folder of its own (0700, files 0600 whatever the umask),
  deleted by its reveal job, and another Unix user's job cannot read them.
"""

from __future__ import annotations

import json
import os
import secrets as random_names
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from soma.config.configs import ConfigRefused
from soma.config.identity import declared
from soma.config.spec import RunSpec
from soma.errors import SomaError
from soma.secagg import SecAggError, Secrets, Session, advertise, masked_input, share
from soma.store import Store

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
PREFIX = "t/round/0/m/secagg"


def config_of(tmp: Path, **more) -> dict:
    """A workflow config as the Snakefile hands it to the jobs: 3 clients of the control task."""
    config = {
        "run": "sec",
        "store": str(tmp / "store"),
        "task": "soma.tasks.control",
        "task_options": {"soma.tasks.control": {"examples": 16}},
        "clients": 3,
        "rounds": 1,
        "seed": 0,
        "strategy": "fedavg",
        "participation": None,
        "quorum": None,
        "tree": None,
        "clients_per_job": 1,
        "threads": 1,
        "metric": "loss",
        "secure_aggregation": {"threshold": 2, "secrets": str(tmp / "secrets/{client}")},
    }
    config.update(more)
    return config


# --- item 4: the threshold -------------------------------------------------------------------


def test_a_threshold_at_or_below_half_a_rounds_clients_is_refused_naming_the_option() -> None:
    for clients, threshold in ((4, 2), (10, 5), (2, 1)):
        config = {"run": "r", "task": "soma.tasks.control", "clients": clients, "rounds": 1}
        config |= {"seed": 0, "secure_aggregation": {"threshold": threshold}}
        with pytest.raises(ConfigRefused, match="config key `secure_aggregation`"):
            RunSpec.from_config(config).check()
    config["clients"], config["participation"] = 10, 4  # 4 of 10 a round: 3 is more than half
    config["secure_aggregation"] = {"threshold": 2}
    with pytest.raises(ConfigRefused, match="threshold 2 is at or below half the 4 clients"):
        RunSpec.from_config(config).check()
    config["secure_aggregation"] = {"threshold": 3}
    RunSpec.from_config(config).check()
    with pytest.raises(SecAggError, match="at or below half the 4 members.*at least 3"):
        Session(PREFIX, (0, 1, 2, 3), 2)
    Session(PREFIX, (0, 1, 2, 3), 3)


def test_a_process_hosting_at_least_the_threshold_is_refused_before_anything_is_written(
    tmp_path, capsys
) -> None:
    from soma.cli import main

    store = tmp_path / "s"
    command = ["client", "--store", str(store), "--run", "r", "--rounds", "1"]
    command += ["--clients", "5", "--secure-aggregation", "3", "--option", "examples=8"]
    command += ["--task", "soma.tasks.control", "--deadline", "1"]
    assert main([*command, "--mine", "0-2"]) == 1
    said = capsys.readouterr().err
    assert said.startswith("soma: --mine/--secure-aggregation: this process would host 3"), said
    assert not store.exists(), "refused before anything is written"
    with pytest.raises(SomaError, match="--secure-aggregation: threshold 2 is at or below half"):
        RunSpec(run="r", task="soma.tasks.control", clients=4, rounds=1, secure=2,
                mine=(0,), given="args").check()  # fmt: skip
    # fewer than the threshold, or every client (nobody outside to hide from), is fine
    RunSpec(
        run="r", task="soma.tasks.control", clients=5, rounds=1, secure=3, mine=(0, 1), given="args"
    ).check()
    RunSpec(
        run="r", task="soma.tasks.control", clients=4, rounds=1, secure=3, mine=(0, 1, 2, 3)
    ).check()


# --- item 3: the secrets folder, checked ------------------------------------------------------


def test_a_secrets_folder_without_client_is_refused_and_is_not_the_runs_identity() -> None:
    base = {"run": "r", "task": "soma.tasks.control", "clients": 3, "rounds": 1, "seed": 0}
    for bad in ("/srv/secrets", "/srv/{cleint}", "/srv/{client"):
        config = base | {"secure_aggregation": {"threshold": 2, "secrets": bad}}
        with pytest.raises(ConfigRefused, match=r"config key `secure_aggregation.secrets`"):
            RunSpec.from_config(config).check()
    one = base | {"secure_aggregation": {"threshold": 2, "secrets": "/a/{run}/{client}"}}
    other = base | {"secure_aggregation": {"threshold": 2, "secrets": "/b/{client}"}}
    RunSpec.from_config(one).check()
    assert declared(one) == declared(other), "where secrets are kept is not what the run is"


# --- the workflow's secure jobs, at library level ---------------------------------------------


def ring_blobs(store: Store) -> list[str]:
    """The masked inputs' ring elements in the store (uint64 tensor maps with a "size")."""
    found = []
    for path in sorted((store.directory / "blobs").rglob("*")):
        if not path.is_file():
            continue
        try:
            tensors = store.get_tensors(path.name)
        except Exception:  # noqa: BLE001 - a JSON record, not tensors
            continue
        if "size" in tensors and tensors["size"].dtype == torch.uint64:
            found.append(path.name)
    return found


def start_and_share(tmp: Path, config: dict) -> Path:
    """The start job, then every client's keys and share jobs; the start receipt."""
    from soma import workflow
    from soma.workflow import secure as jobs

    results = tmp / "results"
    workflow.start(config, str(results / "start.json"))
    start = results / "start.json"
    for k in range(config["clients"]):
        jobs.keys(config, 0, k, str(start), str(results / f"keys/{k}.json"))
    for k in range(config["clients"]):
        jobs.share(config, 0, k, str(start), str(results / f"share/{k}.json"))
    return start


def test_a_rerun_train_job_writes_no_second_masked_input(tmp_path, monkeypatch) -> None:
    """The second attempt trains differently (as on a GPU it may): were it masked with the
    same secrets, the two masked inputs' difference would be the two exports' in clear."""
    from soma.run import step
    from soma.workflow import secure as jobs

    config = config_of(tmp_path)
    start = start_and_share(tmp_path, config)
    receipt = tmp_path / "results/client/0.json"
    jobs.train(config, 0, 0, str(start), str(receipt))
    first = json.loads(receipt.read_text())
    assert first["secure"] is True and "earlier" not in first
    real = step.secure

    def otherwise(*args, **kwargs):
        done = real(*args, **kwargs)
        export, size = done.trained
        for keys in export.values():
            for t in keys.values():
                t.add_(0.125)
        return done

    monkeypatch.setattr(step, "secure", otherwise)
    receipt.unlink()
    jobs.train(config, 0, 0, str(start), str(receipt))  # the rerun
    store = Store(config["store"])
    assert len(ring_blobs(store)) == 1, "one masked input of client 0, ever"
    assert json.loads(receipt.read_text())["earlier"] is True
    # client 1's earlier attempt claimed its masking and died before writing: it drops out
    from soma.secagg.round import session_of
    from soma.workflow import meeting_of, spec_of

    session = session_of(meeting_of(spec_of(config), 0, json.loads(start.read_text())))
    store.claim(session.name("masking", 1), store.put_value({"client": 1}))
    jobs.train(config, 0, 1, str(start), str(tmp_path / "results/client/1.json"))
    dropped = json.loads((tmp_path / "results/client/1.json").read_text())["dropped"]
    assert "its masks are used once" in dropped
    assert len(ring_blobs(store)) == 1


def test_nothing_masked_is_written_by_a_second_masking_with_the_same_secrets(tmp_path) -> None:
    """At the protocol: a client's secrets as the workflow reloads them, masked twice."""
    store = Store(tmp_path)
    session = Session(PREFIX, (0, 1, 2), 2)
    kept = {k: advertise(store, session, k) for k in range(3)}
    for k in range(3):
        share(store, session, kept[k], deadline=5)
    export = {"n": {"w": torch.ones(8, dtype=torch.float64)}}
    masked_input(store, session, kept[0], export, 3.0, deadline=5)
    again = Secrets.from_private_record(session, kept[0].private_record())
    other = {"n": {"w": torch.full((8,), 2.0, dtype=torch.float64)}}
    with pytest.raises(SecAggError, match="client 0's masking was already claimed"):
        masked_input(store, session, again, other, 3.0, deadline=5)
    assert len(ring_blobs(store)) == 1


def test_a_secure_round_keeps_each_clients_secrets_0700_and_deletes_them_at_its_reveal(
    tmp_path,
) -> None:
    from soma.workflow import secure as jobs

    config = config_of(tmp_path)
    before = os.umask(0)  # whatever the umask: 0700 and 0600 on purpose
    try:
        start = start_and_share(tmp_path, config)
        for k in range(3):
            folder = tmp_path / f"secrets/{k}"
            assert folder.stat().st_mode & 0o777 == 0o700
            (file,) = folder.iterdir()
            assert file.name == "round-0.json" and file.stat().st_mode & 0o777 == 0o600
        results = tmp_path / "results"
        for k in range(3):
            jobs.train(config, 0, k, str(start), str(results / f"client/{k}.json"))
        for k in range(3):
            trained = str(results / f"client/{k}.json")
            jobs.reveal(config, 0, k, str(start), trained, str(results / f"reveal/{k}.json"))
        reveals = [str(results / f"reveal/{k}.json") for k in range(3)]
        jobs.average(config, 0, str(start), reveals, str(results / "average.json"))
    finally:
        os.umask(before)
    average = json.loads((results / "average.json").read_text())
    assert average["inputs"] == [{"client": k, "secure": True} for k in range(3)]
    for k in range(3):
        assert list((tmp_path / f"secrets/{k}").iterdir()) == [], "deleted once revealed"
    # client 0's jobs rerun once its secrets are gone: what it did stands, nothing is redone
    revealed = (results / "reveal/0.json").read_text()
    jobs.reveal(config, 0, 0, str(start), str(results / "client/0.json"), str(results / "r0"))
    assert (results / "r0").read_text() == revealed
    jobs.train(config, 0, 0, str(start), str(results / "t0"))
    assert json.loads((results / "t0").read_text())["earlier"] is True


def test_a_folder_of_another_user_is_refused_naming_the_client(tmp_path) -> None:
    from soma.config import secrets as private

    if os.geteuid() != 0:
        pytest.skip("needs root, to give a folder to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(private.SecretsError, match="client 4's secrets folder .* belongs to"):
        private.keep(theirs / "round-0.json", 4, {"s": "x"})
    assert list(theirs.iterdir()) == []


# --- secrets read back: checked as they were written, and against what the client published ----


def kept_secrets(tmp: Path, client: int = 4) -> Path:
    from soma.config import secrets as private

    path = tmp / "secrets" / str(client) / "round-0.json"
    private.keep(path, client, {"session": PREFIX, "client": client, "c": "00"})
    return path


OPEN = {  # what another user could have done, and what the refusal says
    "folder group-writable": (lambda p: os.chmod(p.parent, 0o770), "folder .* has mode 770"),
    "folder others may read": (lambda p: os.chmod(p.parent, 0o705), "folder .* has mode 705"),
    "file group-readable": (lambda p: os.chmod(p, 0o640), "file .*round-0.json has mode 640"),
    "file a link": (
        lambda p: (p.rename(p.with_name("x")), p.symlink_to(p.with_name("x"))),
        "file .*round-0.json cannot be opened as a file of its own",
    ),
    "folder a link": (
        lambda p: (p.parent.rename(p.parent.with_name("y")), p.parent.symlink_to("y")),
        "folder .* is not a folder",
    ),
}


@pytest.mark.fast
@pytest.mark.parametrize("how", list(OPEN))
def test_secrets_others_could_read_or_change_are_refused_when_read_naming_file_and_mode(
    tmp_path, how
) -> None:
    from soma.config import secrets as private

    path = kept_secrets(tmp_path)
    assert private.read(path, 4)["client"] == 4
    change, said = OPEN[how]
    change(path)
    with pytest.raises(private.SecretsError, match=f"client 4's secrets {said}"):
        private.read(path, 4)


@pytest.mark.fast
@pytest.mark.parametrize("what", ["folder", "file"])
def test_secrets_of_another_owner_are_refused_when_read_naming_the_owner(tmp_path, what) -> None:
    from soma.config import secrets as private

    if os.geteuid() != 0:
        pytest.skip("needs root, to give a folder to another user")
    path = kept_secrets(tmp_path)
    os.chown(path.parent if what == "folder" else path, 65534, 65534)
    with pytest.raises(private.SecretsError, match=f"client 4's secrets {what} .* belongs to"):
        private.read(path, 4)


@pytest.mark.fast
def test_another_clients_secrets_in_a_clients_folder_are_refused_naming_both(tmp_path) -> None:
    from soma.config import secrets as private

    path = kept_secrets(tmp_path, client=4)
    theirs = kept_secrets(tmp_path, client=5)
    shutil.copyfile(theirs, path)
    with pytest.raises(private.SecretsError, match="client 4's secrets file .* client 5's"):
        private.read(path, 4)


@pytest.mark.fast
@pytest.mark.parametrize("phase", ["share", "train", "reveal"])
def test_secrets_swapped_for_others_valid_ones_are_refused_before_use(tmp_path, phase) -> None:
    """A swapped folder's secrets, made for this very session and client (so they pass every
    check of the folder), are not those whose public half the client published: refused,
    naming the client and the session, and the phase writes nothing."""
    from soma import workflow
    from soma.config import secrets as private
    from soma.secagg.errors import NotItsSecrets
    from soma.secagg.round import session_of
    from soma.workflow import meeting_of, spec_of
    from soma.workflow import secure as jobs

    config = config_of(tmp_path)
    results = tmp_path / "results"
    start = results / "start.json"
    workflow.start(config, str(start))
    for k in range(3):
        jobs.keys(config, 0, k, str(start), str(results / f"keys/{k}.json"))
    if phase != "share":
        for k in range(3):
            jobs.share(config, 0, k, str(start), str(results / f"share/{k}.json"))
    if phase == "reveal":
        for k in range(3):
            jobs.train(config, 0, k, str(start), str(results / f"client/{k}.json"))
    session = session_of(meeting_of(spec_of(config), 0, json.loads(start.read_text())))
    path = tmp_path / "secrets/0/round-0.json"
    private.keep(path, 0, Secrets(session, 0).private_record())  # the swap
    store = Store(config["store"])
    before = sorted(store.bound(session.prefix))
    receipt = str(results / f"{phase}-again.json")
    if phase == "share":
        run = lambda: jobs.share(config, 0, 0, str(start), receipt)  # noqa: E731
    elif phase == "train":  # the masking itself (the train job's, at the protocol)
        swapped = Secrets.from_private_record(session, private.read(path, 0))
        export = {"n": {"w": torch.ones(2)}}
        run = lambda: masked_input(store, session, swapped, export, 1.0, deadline=5)  # noqa: E731
    else:
        trained = str(results / "client/0.json")
        run = lambda: jobs.reveal(config, 0, 0, str(start), trained, receipt)  # noqa: E731
    with pytest.raises(NotItsSecrets, match=f"secure sum '{session.prefix}': client 0's secrets"):
        run()
    assert sorted(store.bound(session.prefix)) == before, "nothing written"


# --- two Unix users: one client's job cannot read the other's secrets -------------------------


def as_user(user, work) -> str:
    """`work()` in a child process that is `user` (uid, gid, no other groups, umask 0): forked
    from this one, so that it needs to read nothing of this interpreter's own files, which
    another user may not be able to (a Python under /root); what it returned, or why not."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.umask(0)
            os.write(w, str(work()).encode())
            code = 0
        except BaseException as error:  # noqa: BLE001 - told to the parent
            os.write(w, f"{type(error).__name__}: {error}".encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as said:
        out = said.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    return out


def try_to_read(folder: Path) -> str:
    """What another user gets of a client's secrets folder: its list, its round's file."""
    said = []
    for attempt in (lambda: os.listdir(folder), lambda: (folder / "round-0.json").read_text()):
        try:
            attempt()
        except PermissionError:
            said.append("refused")
        else:
            said.append("read")
    return " ".join(said)


@pytest.fixture
def two_users():
    if os.geteuid() != 0:
        pytest.skip("creating two Unix users needs root")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel are not installed")
    import pwd

    names = [f"soma-{who}-{random_names.token_hex(3)}" for who in "ab"]
    made = []
    try:
        for name in names:
            done = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", name],
                capture_output=True, text=True,
            )  # fmt: skip
            if done.returncode != 0:
                pytest.skip(f"useradd {name} failed: {done.stderr.strip()}")
            made.append(name)
        yield [pwd.getpwnam(name) for name in names]
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


def test_one_clients_job_cannot_read_another_clients_secrets(two_users) -> None:
    """Clients 0 and 1 run their keys jobs as users A and B (umask 0, so only the modes set on
    purpose keep anything private); each then tries to read the other's secrets folder."""
    from soma import workflow

    base = Path(tempfile.mkdtemp(prefix="soma-two-users-"))
    try:
        base.chmod(0o777)  # both users make their files here; the store is everybody's
        config = config_of(base)
        before = os.umask(0)
        try:
            workflow.start(config, str(base / "results/start.json"))
            for path in [base, *base.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o777 if path.is_dir() else 0o666)
        finally:
            os.umask(before)

        from soma.secagg import crypto
        from soma.workflow import secure as jobs

        crypto.new_private_key()  # `cryptography` imported here, before the fork
        start = str(base / "results/start.json")
        for mine, user in enumerate(two_users):
            receipt = str(base / f"results/keys/{mine}.json")
            as_user(user, lambda: jobs.keys(config, 0, mine, start, receipt))  # noqa: B023
        for mine, user in enumerate(two_users):
            folder = base / f"secrets/{mine}"
            assert folder.stat().st_uid == user.pw_uid
            assert folder.stat().st_mode & 0o777 == 0o700
            assert (folder / "round-0.json").stat().st_mode & 0o777 == 0o600
        for mine, user in enumerate(two_users):
            theirs = base / f"secrets/{1 - mine}"
            said = as_user(user, lambda: try_to_read(theirs))  # noqa: B023
            assert said == "refused refused", f"client {mine}'s user read {theirs}: {said}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
