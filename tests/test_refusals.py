"""Every refusal is a SomaError that names the culprit, and comes before anything is changed.

One error root for the library (`soma.SomaError`), each class still catchable as the builtin
it always was; `soma.load` refusing what only shows when copying (a meta tensor, tied weights
given two values) before the first copy; `soma.fedavg` refusing sizes and tensors it cannot
weigh or fold; store names that would be too long for the filesystem or would make `ls` lie;
the `soma` command's arguments, each a one-line `soma: ...` and nothing made; and the
workflow's run name, always the text that was typed.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from torch import nn

import soma
from soma.config import configs
from soma.errors import AggregationError, LoadError, SomaError
from soma.store import Store, names
from soma.store.errors import BadName, BadStore

ROOT = Path(__file__).resolve().parent.parent

torch.set_num_threads(1)


# --- one root -----------------------------------------------------------------------------------


def soma_exceptions() -> list[type[BaseException]]:
    """Every exception class soma defines, in every module of the package."""
    found = {}
    for info in pkgutil.walk_packages(soma.__path__, "soma."):
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith("soma"):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


def test_every_exception_soma_defines_is_a_soma_error() -> None:
    classes = soma_exceptions()
    assert len(classes) > 30
    roots = [c.__qualname__ for c in classes if not issubclass(c, SomaError)]
    assert roots == [], f"not under soma.SomaError: {roots}"
    assert soma.SomaError is SomaError and "SomaError" in soma.__all__


# What each class was catchable as before there was one root: still exactly that.
BUILTINS = (ValueError, LookupError, TypeError, TimeoutError, OSError)
CAUGHT_AS = {
    "soma.errors.SomaError": (),
    "soma.errors.ExportError": (ValueError,),
    "soma.errors.LoadError": (ValueError,),
    "soma.errors.AggregationError": (ValueError,),
    "soma.partition.PartitionError": (ValueError,),
    "soma.store.errors.StoreError": (),
    "soma.store.errors.BadName": (ValueError,),
    "soma.store.errors.NameConflict": (ValueError,),
    "soma.store.errors.BadDigest": (ValueError,),
    "soma.store.errors.BadBlob": (ValueError,),
    "soma.store.errors.UnknownDigest": (LookupError,),
    "soma.store.errors.UnknownName": (LookupError,),
    "soma.store.errors.CorruptBlob": (),
    "soma.store.errors.CorruptName": (),
    "soma.store.errors.NoCodec": (TypeError,),
    "soma.store.errors.NotText": (TypeError,),
    "soma.round.once.RoundError": (ValueError,),
    "soma.round.once.RoundIncomplete": (ValueError, TimeoutError, OSError),
    "soma.round.once.AveragerDied": (ValueError, TimeoutError, OSError),
    "soma.tasks.TaskError": (ValueError,),
    "soma.strategies.StrategyError": (ValueError,),
    "soma.training.TrainingError": (ValueError,),
    "soma.config.participation.ParticipationError": (ValueError,),
    "soma.device.DeviceError": (ValueError,),
    "soma.model.ModelError": (ValueError,),
    "soma.config.configs.ConfigRefused": (ValueError,),
}


@pytest.mark.parametrize("where", sorted(CAUGHT_AS))
def test_each_refusal_is_caught_as_the_builtin_it_always_was(where: str) -> None:
    module, name = where.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, SomaError)
    caught_as = {b for b in BUILTINS if issubclass(cls, b)}
    assert caught_as == set(CAUGHT_AS[where]), where


def test_a_corrupt_blob_is_not_mistaken_for_a_bad_value() -> None:
    """CorruptBlob is the disk's doing: an `except ValueError` around a read must not eat it."""
    from soma.store.errors import CorruptBlob

    with pytest.raises(SomaError):
        try:
            raise CorruptBlob("p", "a" * 64, "b" * 64)
        except ValueError:  # pragma: no cover - the point is that this does not happen
            pytest.fail("a CorruptBlob was caught as a ValueError")


# --- soma.load -----------------------------------------------------------------------------------


def two_layers(seed: int) -> dict[str, nn.Module]:
    torch.manual_seed(seed)
    return {"first": nn.Linear(3, 4), "second": nn.Linear(4, 2)}


def snapshot(nodes: dict) -> dict:
    return {n: {k: t.clone() for k, t in node.state_dict().items()} for n, node in nodes.items()}


def unchanged(nodes: dict, before: dict) -> bool:
    now = snapshot(nodes)
    return now.keys() == before.keys() and all(
        torch.equal(now[n][k], before[n][k]) for n in before for k in before[n]
    )


def test_load_refuses_a_meta_tensor_in_the_state_before_copying_anything() -> None:
    nodes = two_layers(0)
    before = snapshot(nodes)
    state = soma.export(two_layers(1))  # differs everywhere: a copy would show
    state["second"]["weight"] = torch.empty(2, 4, device="meta")
    with pytest.raises(
        LoadError, match=r"node 'second' key 'weight' is a meta tensor in the state"
    ):
        soma.load(nodes, state)
    assert unchanged(nodes, before)  # "first", loaded before "second", untouched too


def test_load_refuses_nodes_on_the_meta_device_naming_node_and_key() -> None:
    with torch.device("meta"):
        nodes = {"lazy": nn.Linear(3, 4)}  # a shape, no memory: a copy into it does nothing
    state = {"lazy": soma.export({"x": nn.Linear(3, 4)})["x"]}
    with pytest.raises(LoadError, match=r"node 'lazy' key 'weight' is a meta tensor in the train"):
        soma.load(nodes, state)


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ({"first": torch.tensor(0.0)}, r"^node 'first' in the state is a Tensor, not a map of"),
        ({"first": [torch.zeros(4, 3)]}, r"^node 'first' in the state is a list, not a map of"),
        ([("first", {})], r"^the state is a list, not a map of nodes"),
    ],
    ids=["tensor", "list", "state a list"],
)
def test_load_says_what_a_node_is_when_it_is_not_a_map_of_tensors(state, said) -> None:
    nodes = two_layers(0)
    before = snapshot(nodes)
    with pytest.raises(LoadError, match=said):
        soma.load(nodes, state, partial=True)
    assert unchanged(nodes, before)


class TiedLM(nn.Module):
    """Weight tying: the output layer is the embedding, one Parameter under two keys."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def test_load_refuses_tied_weights_given_two_values_naming_both_keys() -> None:
    torch.manual_seed(0)
    nodes = {"lm": TiedLM(), "out": nn.Linear(5, 1)}
    before = snapshot(nodes)
    state = soma.export({"lm": TiedLM(), "out": nn.Linear(5, 1)})
    state["lm"]["head.weight"] = state["lm"]["head.weight"] + 1.0
    with pytest.raises(
        LoadError, match=r"node 'lm' key 'embed.weight' and node 'lm' key 'head.weight' are one"
    ):
        soma.load(nodes, state)
    assert unchanged(nodes, before)


def test_tied_weights_given_one_value_load() -> None:
    torch.manual_seed(0)
    nodes, source = {"lm": TiedLM()}, {"lm": TiedLM()}
    state = soma.export(source)
    state["lm"]["head.weight"] = state["lm"]["embed.weight"].clone()  # equal, not the same
    soma.load(nodes, state)
    assert torch.equal(nodes["lm"].head.weight, source["lm"].embed.weight)
    assert nodes["lm"].head.weight is nodes["lm"].embed.weight  # still tied


def test_a_parameter_shared_by_two_nodes_is_tied_too() -> None:
    shared = nn.Linear(2, 2)
    nodes = {"a": shared, "b": shared}
    before = snapshot(nodes)
    state = soma.export({"a": nn.Linear(2, 2), "b": nn.Linear(2, 2)})
    with pytest.raises(LoadError, match=r"node 'a' key 'weight' and node 'b' key 'weight'"):
        soma.load(nodes, state)
    assert unchanged(nodes, before)
    state["b"] = {k: t.clone() for k, t in state["a"].items()}
    soma.load(nodes, state)
    assert torch.equal(shared.weight, state["a"]["weight"])


# --- soma.fedavg ---------------------------------------------------------------------------------


def an_export(value: float) -> dict:
    return {"layer": {"weight": torch.full((2, 2), value), "bias": torch.full((2,), value)}}


@pytest.mark.parametrize("huge", [10**400, Fraction(10**400, 3)], ids=["int", "Fraction"])
@pytest.mark.parametrize("as_iterator", [False, True], ids=["list", "iterator"])
def test_fedavg_refuses_a_size_too_large_for_a_float_naming_the_export(huge, as_iterator) -> None:
    exports, sizes = [an_export(1.0), an_export(2.0), an_export(3.0)], [1, 2, huge]
    given = iter(list(zip(exports, sizes, strict=True))) if as_iterator else exports
    with pytest.raises(AggregationError, match=r"^size of export 2 is too large to be a weight"):
        soma.fedavg(given, None if as_iterator else sizes)
    assert all(
        torch.equal(e["layer"]["bias"], torch.full((2,), float(i + 1)))
        for i, e in enumerate(exports)
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: torch.empty(2, device="meta"), "a meta tensor"),
        (lambda: torch.ones(2).to_sparse(), "a torch.sparse_coo tensor"),
    ],
    ids=["meta", "sparse"],
)
@pytest.mark.parametrize("at", [0, 2])
@pytest.mark.parametrize("as_iterator", [False, True], ids=["list", "iterator"])
def test_fedavg_refuses_a_tensor_it_cannot_fold_naming_export_node_and_key(
    make, said, at, as_iterator
) -> None:
    exports = [an_export(1.0), an_export(2.0), an_export(3.0)]
    exports[at]["layer"]["bias"] = make()
    given = iter(exports) if as_iterator else exports
    with pytest.raises(AggregationError) as refused:
        soma.fedavg(given)
    assert str(refused.value).startswith(f"node 'layer' key 'bias' in export {at} is {said}")


def test_fedavg_refuses_exports_or_sizes_that_are_not_a_collection() -> None:
    with pytest.raises(AggregationError, match="^exports must be a list or an iterator, not int"):
        soma.fedavg(5)
    with pytest.raises(AggregationError, match="^sizes must be a list or an iterator, not int"):
        soma.fedavg([an_export(1.0)], 3)
    mean = soma.fedavg([an_export(1.0), an_export(4.0)], (n for n in (2, 1)))  # any iterable
    assert torch.equal(mean["layer"]["bias"], torch.full((2,), 2.0))


# --- store names ---------------------------------------------------------------------------------


def nothing_written(store: Store) -> bool:
    return store.bound() == [] and not any((store.directory / "tmp").iterdir())


HIDDEN = {
    "NUL": ("\x00", "a control character U+0000"),
    "unit separator": ("\x1f", "a control character U+001F"),
    "DEL": ("\x7f", "a control character U+007F"),
    "right-to-left override": ("\u202e", "a format character U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    "zero width space": ("\u200b", "a format character U+200B (ZERO WIDTH SPACE)"),
    "byte order mark": ("\ufeff", "a format character U+FEFF"),
    "line separator": ("\u2028", "a line separator character U+2028"),
}


@pytest.mark.parametrize("why", sorted(HIDDEN))
def test_a_name_with_a_control_or_format_character_is_refused_naming_it(tmp_path, why) -> None:
    store = Store(tmp_path / "store")
    character, said = HIDDEN[why]
    digest = store.put(b"x")
    name = f"run/abc{character}def/0"
    for op in (
        lambda: store.bind(name, digest),
        lambda: store.claim(name, digest),
        lambda: store.keep(name, 1),
        lambda: store.resolve(name),
        lambda: store.bound(f"run/ab{character}"),
    ):
        with pytest.raises(BadName) as refused:
            op()
        assert said in str(refused.value) and "at position" in str(refused.value)
    assert nothing_written(store)


@pytest.mark.parametrize(
    ("name", "said"),
    [  # the 3000 segments last: a broken check (a mutant) makes 3000 folders there, slowly
        ("run/" + "x" * 256, r"has a segment of 256 bytes in UTF-8 \('x"),
        ("run/" + "é" * 128, r"has a segment of 256 bytes in UTF-8 \('é"),  # 128 characters
        ("/".join(["x" * 255] * 4) + "/y", r"is 102[56] bytes in UTF-8"),
        ("a/" * 3000 + "b", r"is 600\d bytes in UTF-8; a name is at most 1024 bytes"),
    ],
    ids=["long segment", "long in UTF-8", "just over", "3000 segments"],
)
def test_a_name_too_long_for_the_filesystem_is_refused_before_it_is_asked(
    tmp_path, request, name, said
) -> None:
    store = Store(tmp_path / "store")
    digest = store.put(b"x")
    # a store whose checks are broken (a mutant) makes 3000 nested folders, deeper than
    # pytest's own cleanup recurses: removed here whatever happens
    request.addfinalizer(lambda: subprocess.run(["rm", "-rf", str(tmp_path / "store")]))
    for op in (
        lambda: store.bind(name, digest),
        lambda: store.claim(name, digest),
        lambda: store.keep(name, 1),
        lambda: store.resolve(name),
        lambda: store.bound(name + "/"),
    ):
        with pytest.raises(BadName, match=said) as refused:
            op()
        assert len(str(refused.value)) < 1500  # a 6001-character name is not all shown
    assert nothing_written(store)


def deep_folder(root: Path, size: int) -> Path:
    """A folder under `root` whose absolute path is exactly `size` bytes long."""
    path = root
    while len(os.fsencode(path)) < size:
        room = size - len(os.fsencode(path)) - 1
        path = path / ("d" * min(200, room) if room > 1 else "d")
        if len(os.fsencode(path)) > size or room < 1:
            raise AssertionError("cannot make a path of that size here")
    assert len(os.fsencode(path)) == size
    return path


def test_the_longest_name_in_the_deepest_store_is_under_path_max(tmp_path) -> None:
    """Every limit at once: a store folder of MAX_STORE_PATH_BYTES and a name of
    MAX_NAME_BYTES made of segments of MAX_SEGMENT_BYTES; the kernel takes every path."""
    folder = deep_folder(tmp_path, names.MAX_STORE_PATH_BYTES)
    store = Store(folder)
    longest = "/".join(["x" * 255] * 3 + ["x" * 254, "y"])
    assert len(longest.encode()) == names.MAX_NAME_BYTES
    assert len(os.fsencode(store.directory / "names" / longest)) < 4096  # PATH_MAX
    digest = store.keep(longest, {"a": 1})
    assert store.resolve(longest) == digest and store.recall(longest) == {"a": 1}
    assert store.claim(longest[:-1] + "z", digest) is True
    assert store.bound("x" * 255 + "/") == sorted([longest, longest[:-1] + "z"])


def test_a_store_folder_too_long_for_its_names_is_refused_and_not_made(tmp_path) -> None:
    folder = deep_folder(tmp_path, names.MAX_STORE_PATH_BYTES + 1)
    with pytest.raises(BadStore, match=r"is 3001 bytes long; a store's path is at most 3000"):
        Store(folder)
    assert not folder.exists()


def test_a_store_where_a_file_is_is_refused_and_nothing_made(tmp_path) -> None:
    (tmp_path / "afile").write_text("not a store")
    with pytest.raises(BadStore, match=r"store folder .*afile is a file, not a folder"):
        Store(tmp_path / "afile")
    with pytest.raises(BadStore, match=r"cannot be a store: .*afile is a file"):
        Store(tmp_path / "afile" / "store")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "names").write_text("")
    with pytest.raises(BadStore, match=r"cannot be a store: .*half/names is a file"):
        Store(tmp_path / "half")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "half"]
    assert [p.name for p in (tmp_path / "half").iterdir()] == ["names"]


def test_a_run_name_leaves_room_for_what_soma_keeps_under_it() -> None:
    assert names.check_run_name("x" * 200 + "/" + "y" * 200) == "x" * 200 + "/" + "y" * 200
    longest = "/".join(["r" * 200] * 4)[: names.MAX_RUN_BYTES]
    assert names.check_run_name(longest) == longest
    # the longest name soma keeps under a run, for a round and a client far beyond any run's
    under = f"{longest}/round/9999999999/{'a' * 64}/inputs/{'b' * 64}/computed/{'c' * 16}"
    assert names.check_name(under) == under
    with pytest.raises(BadName, match=r"is 769 bytes in UTF-8; a run's name is at most 768"):
        names.check_run_name(longest + "r")
    for bad, said in [
        ("../x", "has a '..' segment"),
        ("a//b", "has an empty segment"),
        ("a/round/b", "has a 'round' segment"),
        ("a\u202eb", r"U\+202E"),
        (2024, "a name is text, not int"),
    ]:
        with pytest.raises(BadName, match=said):
            names.check_run_name(bad)


# --- the soma command ----------------------------------------------------------------------------


def soma_command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("SLURM_PROCID", None)
    return subprocess.run(
        [sys.executable, "-m", "soma.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


CLIENT = ("client", "--store", "store", "--run", "r", "--rounds", "1", "--clients", "2")
REFUSED_COMMANDS = {
    "rounds 0": (CLIENT + ("--mine", "0", "--rounds", "0"), "--rounds must be an integer >= 1"),
    "rounds -1": (CLIENT + ("--mine", "0", "--rounds", "-1"), "--rounds must be an integer >= 1"),
    "clients 0": (CLIENT + ("--mine", "0", "--clients", "0"), "--clients must be an integer >= 1"),
    "threads 0": (CLIENT + ("--mine", "0", "--threads", "0"), "--threads must be an integer >= 1"),
    "seed -1": (CLIENT + ("--mine", "0", "--seed", "-1"), "--seed must be an integer >= 0"),
    "run ..": (CLIENT + ("--mine", "0", "--run", "../x"), "--run '../x' is not a run's name"),
    "run .": (CLIENT + ("--mine", "0", "--run", "a/./b"), "has a '.' segment"),
    "run empty segment": (CLIENT + ("--mine", "0", "--run", "a//b"), "has an empty segment"),
    "run bidi": (CLIENT + ("--mine", "0", "--run", "a\u202eb"), "U+202E"),
    "deadline negative": (CLIENT + ("--mine", "0", "--deadline", "-1"), "--deadline must be"),
    "deadline nan": (CLIENT + ("--mine", "0", "--deadline", "nan"), "not '.nan' (a number)"),
    "quorum": (
        CLIENT + ("--mine", "0", "--quorum", "3"),
        "--participation/--quorum: quorum must be a count between 1 and 2, not '3'",
    ),
    "strategy": (
        CLIENT + ("--mine", "0", "--strategy", "nosuch"),
        "--strategy: 'nosuch' is neither a built-in strategy",
    ),
    "option": (
        CLIENT + ("--mine", "0", "--task", "soma.tasks.digits", "--option", "epochz=2"),
        "--option 'epochz': not an option of task 'soma.tasks.digits'",
    ),
    "client store a file": (
        ("client", "--store", "afile", "--run", "r", "--rounds", "1", "--clients", "2"),
        "--store afile: store folder",
    ),
    "client store under a file": (
        ("client", "--store", "afile/s", "--run", "r", "--rounds", "1", "--clients", "2"),
        "afile is a file",
    ),
    "status store a file": (("status", "--store", "afile", "--run", "r"), "is a file"),
    "export store a file": (("export", "--store", "afile", "--run", "r", "-o", "m"), "is a file"),
    "status clients 0": (("status", "--store", "s", "--run", "r", "--clients", "0"), "--clients"),
    "export round -1": (("export", "--store", "s", "--run", "r", "--round", "-1", "-o", "m"), "-1"),
    "status no store": (("status", "--store", "nowhere", "--run", "r"), "no store at nowhere"),
}


@pytest.mark.slow
@pytest.mark.parametrize("why", sorted(REFUSED_COMMANDS))
def test_a_refused_command_says_one_line_and_makes_nothing(tmp_path, why) -> None:
    args, said = REFUSED_COMMANDS[why]
    if "--mine" not in args and args[0] == "client":
        args = args + ("--mine", "0")
    (tmp_path / "afile").write_text("a file, not a store")
    done = soma_command(*args, cwd=tmp_path)
    assert done.returncode != 0, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("soma: "), done.stderr
    assert said in lines[0], lines[0]
    assert "Traceback" not in done.stderr + done.stdout and "done" not in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no store, no model file


def test_one_line_joins_a_message_of_several_lines() -> None:
    from soma.cli import one_line

    assert one_line(SomaError("first\n\n  second  \nthird")) == "first; second; third"


# --- the workflow's run name ---------------------------------------------------------------------


def test_a_name_given_as_a_number_is_the_text_that_was_typed() -> None:
    given = {"run": float("nan"), "store": 7, "task": True, "rounds": 3}
    typed = configs.typed(given, ["run=nan", "store=007", "rounds=3"])
    assert typed == {"run": "nan", "store": "007", "task": "true", "rounds": 3}
    assert configs.typed({"run": 2024, "metric": float("inf")}) == {"run": "2024", "metric": "inf"}
    assert configs.typed({"run": None}) == {"run": None}  # no name: named after its task


def test_a_schema_refusal_names_the_key() -> None:
    import jsonschema

    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "rounds": {"type": "integer", "minimum": 1, "description": "number of rounds"},
            "opts": {"type": "object", "properties": {"lr": {"type": "number"}}},
        },
    }

    def refusal(config: dict) -> str | None:
        try:
            jsonschema.validate(config, schema)
        except jsonschema.ValidationError as error:
            try:
                raise RuntimeError("Error validating config file.") from None
            except RuntimeError as wrapped:  # as Snakemake wraps it: the context is the error
                wrapped.__context__ = error
                return configs.schema_refusal(wrapped)
        return None

    said = refusal({"rounds": 0})
    said_rounds = "config key `rounds`: '0' (an integer) is less than the minimum of 1"
    assert said == f"{said_rounds} (number of rounds)"
    assert refusal({"runn": 1}) == "config key `runn` is unknown; the keys are rounds, opts"
    said = refusal({"opts": {"lr": "fast"}})
    assert said == "config key `opts` (under 'lr'): 'fast' (text) is not of type 'number'"
    assert configs.schema_refusal(RuntimeError("something else")) is None


def checkout(where: Path) -> Path:
    where.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles"):
        (where / name).symlink_to(ROOT / name)
    return where


def dry_run(where: Path, *config: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--config", *config],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("run", ["nan", "inf", "2024", "007", "True", "1e5"])
def test_a_run_named_like_a_number_is_that_text(tmp_path, run) -> None:
    done = dry_run(checkout(tmp_path / "w"), f"run={run}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert f"results/{run}/summary.tsv" in out, out[-3000:]


@pytest.mark.workflow
def test_a_run_name_the_schema_refuses_is_refused_naming_the_key(tmp_path) -> None:
    where = checkout(tmp_path / "w")
    done = dry_run(where, "run=../x")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "ConfigRefused" in out and "config key `run`: '../x' (text) does not match" in out, out
    done = dry_run(where, "rounds=0")
    said = "config key `rounds`: '0' (an integer) is less than the minimum of 1"
    assert said in done.stdout + done.stderr
    assert sorted(p.name for p in where.iterdir() if not p.is_symlink()) in ([], [".snakemake"])
    assert not (where / "results").exists() and not (where / "store").exists()
