"""How a value becomes blobs and comes back: JSON for structure, safetensors for tensors.

A value is JSON-like — `dict` with text keys, `list`, `tuple`, `str`, `int`, `float`
(NaN and the infinities included), `bool`, `None` — with `torch.Tensor`s anywhere, a bare
tensor included, plus any type a codec was registered for. Reading one back never runs
code that came from the store: no pickle, no `torch.load`; a codec is code this process
registered, found by the name the record gives.

How it is written (one *record* blob per value, plus tensor blobs):

- a dict that is *tensor-shaped* — not empty, every value a tensor, like one node's
  `{key: tensor}` of an export — is its own safetensors blob, so an export
  `{node: {key: tensor}}` is kept node by node and a node that did not change is the blob
  it already was (no bytes written);
- every other tensor ("loose": a bare one, one in a list, one beside non-tensors in a
  dict) goes into a single safetensors blob per record, keyed `"0"`, `"1"`, ... in the
  order the walk meets them;
- the structure is canonical JSON (sorted keys, no whitespace, UTF-8), in which a tensor
  blob is `{"$tensors": digest}`, a loose tensor `{"$tensor": "3"}`, a tuple
  `{"$tuple": [...]}`, a non-finite float `{"$float": "nan"}`, a value kept by a codec
  `{"$codec": [name, encoded]}`, and a user dict that has a key starting with `$`
  `{"$dict": {...}}` — so a one-key object whose key starts with `$` is always a tag.
  The record itself is `{"soma": 1, "tensors": loose-digest?, "value": <tree>}`.

The same value gives the same bytes in any process, so the same digests. What it costs:
dict key order is not kept (keys are sorted, which is what makes it canonical), tensors
come back on the CPU and as plain `torch.Tensor` (a `Parameter` too), and each tensor
comes back as its own tensor (two references to one tensor come back as two tensors).

Decisions:

- tuple: kept, and comes back a tuple (`(export, size)` pairs are natural to keep);
  a *subclass* of tuple (a namedtuple) is refused unless registered, like every subclass:
  types are matched exactly, so nothing comes back as a type it was not (an `IntEnum` is
  not silently an `int`, an `OrderedDict` such as `state_dict()` is not silently a dict —
  pass `dict(sd)`, or register a codec);
- keys of every dict must be `str`, or the key is named in the refusal (`NotText`);
- text must be encodable as UTF-8 (no lone surrogates), or it is refused where it is.

A codec for your own type::

    register_codec(Point, "mylib.point",
                   encode=lambda p: {"x": p.x, "y": p.y},   # to any keepable value
                   decode=lambda d: Point(d["x"], d["y"]))   # from what encode returned

`encode` may return anything keepable (tensors and other codecs' types included);
`decode` receives it back, decoded. The name is what is written down, so a reading
process must register the same name; it is matched on the exact type, never a subclass.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soma.lazy import OnUse
from soma.store.errors import BadBlob, NoCodec, NotText
from soma.store.record_json import MAX_RECORD as MAX_RECORD  # re-exported: where readers
from soma.store.record_json import RECORD_VERSION as RECORD_VERSION  # have always found them
from soma.store.record_json import _tag
from soma.store.record_json import canonical_json as canonical_json
from soma.store.record_json import parse_record as parse_record
from soma.store.record_json import record_bytes as record_bytes
from soma.store.record_json import references as references

if TYPE_CHECKING:
    import torch

    from soma.store import tensorfile
else:  # torch only where a value holds a tensor (soma.lazy.OnUse)
    tensorfile = OnUse("soma.store.tensorfile", globals())

_PLAIN = (dict, list, tuple, str, int, float, bool, type(None))
_TENSOR_TYPES: list[tuple[type, ...]] = []  # (torch.Tensor, torch.nn.Parameter), once known


def tensor_types() -> tuple[type, ...]:
    """The tensor types the store keeps; none while torch is not imported, since no value
    can hold a tensor before it is: so keeping or reading a value without one (a JSON record)
    never imports torch (the torch-free command line, soma.cli)."""
    if not _TENSOR_TYPES:
        torch = sys.modules.get("torch")
        if torch is None:
            return ()
        _TENSOR_TYPES.append((torch.Tensor, torch.nn.Parameter))
    return _TENSOR_TYPES[0]


@dataclass(frozen=True)
class Codec:
    type: type
    name: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


_BY_TYPE: dict[type, Codec] = {}
_BY_NAME: dict[str, Codec] = {}


def register_codec(
    type_: type, name: str, encode: Callable[[Any], Any], decode: Callable[[Any], Any]
) -> None:
    """Let the store keep values of exactly `type_`, written down under `name`.

    Registering the same (type, name) again replaces its functions; a name or a type
    already registered with another partner, or a type the store handles itself, is
    refused with `ValueError`.
    """
    if not isinstance(type_, type):
        raise TypeError(f"register_codec wants a type, not {type_!r}")
    if type_ in _PLAIN or type_ in tensor_types():
        raise ValueError(f"{_type_name(type_)} is kept by the store itself; it takes no codec")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a codec's name is non-empty text, not {name!r}")
    held = _BY_NAME.get(name)
    if held is not None and held.type is not type_:
        raise ValueError(f"codec name {name!r} is already {_type_name(held.type)}'s")
    held = _BY_TYPE.get(type_)
    if held is not None and held.name != name:
        raise ValueError(f"{_type_name(type_)} already has a codec, {held.name!r}")
    codec = Codec(type_, name, encode, decode)
    _BY_TYPE[type_] = codec
    _BY_NAME[name] = codec


def unregister_codec(name: str) -> None:
    """Forget the codec registered under `name` (missing is fine)."""
    codec = _BY_NAME.pop(name, None)
    if codec is not None:
        _BY_TYPE.pop(codec.type, None)


def _type_name(t: type) -> str:
    module = t.__module__
    return t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"


def _key_path(where: str, key: str) -> str:
    """Where `key` of the map at `where` is, for messages: spelled for every key kept, so a
    plain key (printable, no quote or backslash: what json.dumps leaves as it is) skips it."""
    if key.isprintable() and '"' not in key and "\\" not in key:
        return f'{where}["{key}"]'
    return f"{where}[{json.dumps(key, ensure_ascii=False)}]"


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise NotText(f"{what} is not valid Unicode text (a lone surrogate): {text!r}") from None


def is_tensor_map(value: object) -> bool:
    """A non-empty dict whose values are all tensors (and could be a safetensors file)."""
    return (
        type(value) is dict
        and bool(value)
        and "__metadata__" not in value
        and all(type(v) in tensor_types() for v in value.values())
    )


def check_tensor_map(tensors: object, where: str) -> dict[str, torch.Tensor]:
    """Check that `tensors` can be one safetensors blob; refuse naming what cannot."""
    if type(tensors) is not dict or not tensors:
        raise NoCodec(f"{where} is not a non-empty dict of tensors")
    for key, t in tensors.items():
        if type(key) is not str:
            raise NotText(
                f"key {key!r} ({_type_name(type(key))}) in {where} is not text; "
                "every key of a map the store keeps must be str"
            )
        _check_text(key, f"key {key!r} in {where}")
        if type(t) not in tensor_types():
            raise NoCodec(f"{_key_path(where, key)} is a {_type_name(type(t))}, not a tensor")
        problem = tensorfile.tensor_problem(t)
        if problem:
            raise NoCodec(f"{_key_path(where, key)} is {problem}")
    if "__metadata__" in tensors:
        raise NotText(f"key '__metadata__' in {where} is reserved by safetensors")
    _check_count(len(tensors), where)
    return tensors


def _check_count(count: int, where: str) -> None:
    """Refuse writing a tensor file no reader would read back (tensorfile.MAX_TENSORS)."""
    if count > tensorfile.MAX_TENSORS:
        raise NoCodec(
            f"{where} holds {count} tensors, more than the {tensorfile.MAX_TENSORS} one "
            "tensor file may hold; split it into several maps"
        )


@dataclass
class Encoded:
    """A value taken apart: its JSON tree (tensor blobs' digests still to fill in), the
    tensor maps to write as blobs, and the loose tensors for the record's own blob."""

    tree: object
    maps: list[tuple[dict[str, object], dict[str, torch.Tensor]]] = field(default_factory=list)
    loose: list[torch.Tensor] = field(default_factory=list)

    def loose_map(self) -> dict[str, torch.Tensor]:
        return {str(i): t for i, t in enumerate(self.loose)}


def encode(value: object) -> Encoded:
    """Take `value` apart, checking all of it before anything is written."""
    out = Encoded(None)
    out.tree = _encode(value, "value", out, set())
    if out.loose:
        _check_count(len(out.loose), "the loose tensors of value (not in a map of tensors)")
    return out


def _encode(v: object, where: str, out: Encoded, path: set[int]) -> object:
    t = type(v)
    if v is None or t is bool or t is int:
        return v
    if t is str:
        _check_text(v, f"the text at {where}")
        return v
    if t is float:
        if math.isfinite(v):
            return v
        return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if t in tensor_types():
        problem = tensorfile.tensor_problem(v)
        if problem:
            raise NoCodec(f"{where} is {problem}")
        out.loose.append(v)
        return {"$tensor": str(len(out.loose) - 1)}
    if t in (list, tuple, dict):
        if id(v) in path:
            raise NoCodec(f"{where} contains itself; a value kept must be a tree")
        path.add(id(v))
        try:
            if t is dict:
                return _encode_dict(v, where, out, path)
            items = [_encode(x, f"{where}[{i}]", out, path) for i, x in enumerate(v)]
            return items if t is list else {"$tuple": items}
        finally:
            path.discard(id(v))
    codec = _BY_TYPE.get(t)
    if codec is not None:
        inner = _encode(codec.encode(v), f"{where}<{codec.name}>", out, path)
        return {"$codec": [codec.name, inner]}
    hint = ""
    if isinstance(v, (dict, list, tuple, str, int, float)):
        base = next(b for b in (bool, int, float, str, tuple, list, dict) if isinstance(v, b))
        hint = f" (a subclass of {base.__name__}: convert it with {base.__name__}(...) first)"
    raise NoCodec(
        f"{where} is a {_type_name(t)}, which has no codec{hint}; "
        "register one with soma.store.register_codec"
    )


def _encode_dict(v: dict, where: str, out: Encoded, path: set[int]) -> object:
    for key in v:
        if type(key) is not str:
            raise NotText(
                f"key {key!r} ({_type_name(type(key))}) in {where} is not text; "
                "every key of a map the store keeps must be str"
            )
        _check_text(key, f"key {key!r} in {where}")
    if is_tensor_map(v):
        tensors = check_tensor_map(v, where)
        ref: dict[str, object] = {"$tensors": None}
        out.maps.append((ref, tensors))
        return ref
    tree = {key: _encode(v[key], _key_path(where, key), out, path) for key in sorted(v)}
    if any(key.startswith("$") for key in v):
        return {"$dict": tree}
    return tree


def decode(
    tree: object,
    where: str,
    tensors: Callable[[str], dict[str, torch.Tensor]],
    loose: Callable[[], dict[str, torch.Tensor]],
) -> object:
    """Build the value back from its tree; `tensors(digest)` reads a tensor-map blob and
    `loose()` the record's loose tensors. `where` names the record blob for messages."""

    def bad(why: str) -> BadBlob:
        return BadBlob(f"blob {where} is not a valid soma record: {why}")

    def walk(node: object, at: str) -> object:
        if isinstance(node, list):
            return [walk(x, f"{at}[{i}]") for i, x in enumerate(node)]
        if not isinstance(node, dict):
            return node
        tag = _tag(node)
        if tag is None:
            return {k: walk(v, _key_path(at, k)) for k, v in node.items()}
        name, payload = tag
        if name == "$dict" and isinstance(payload, dict):
            return {k: walk(v, _key_path(at, k)) for k, v in payload.items()}
        if name == "$tuple" and isinstance(payload, list):
            return tuple(walk(x, f"{at}[{i}]") for i, x in enumerate(payload))
        if name == "$float" and payload in ("nan", "inf", "-inf"):
            return float(payload)
        if name == "$tensors" and isinstance(payload, str):
            return tensors(payload)
        if name == "$tensor" and isinstance(payload, str):
            held = loose()
            if payload not in held:
                raise bad(f"{at} refers to loose tensor {payload!r}, which it does not have")
            return held[payload]
        if name == "$codec" and isinstance(payload, list) and len(payload) == 2:
            codec_name, inner = payload
            codec = _BY_NAME.get(codec_name) if isinstance(codec_name, str) else None
            if codec is None:
                raise NoCodec(
                    f"{at} was kept by codec {codec_name!r}, which is not registered in this "
                    "process; register_codec it before recalling"
                )
            return codec.decode(walk(inner, f"{at}<{codec_name}>"))
        raise bad(f"{at} has an unknown or malformed tag {name!r}")

    try:
        return walk(tree, "value")
    except RecursionError:
        raise bad("it is nested deeper than this interpreter can rebuild") from None
