"""Broken variants of the store's loaders (soma.store.tensorfile, soma.store.backend): each
drops one bound or one check that tests/store/test_loaders.py holds them to; registered
into tests/mutants.py's MUTANTS."""

from __future__ import annotations

import hashlib
import json
import math

from mutants import _replace, mutant

LOADERS = "tests/store/test_loaders.py"

# --- the tensor file's header (soma/store/tensorfile.py) ----------------------------------


@mutant("header_parsed_uncounted", caught_by=[LOADERS, "-k", "before_parsing"])
def _header_parsed_uncounted() -> None:
    """The header parsed as it comes: no objects or commas counted first."""
    import soma.store.tensorfile as tf

    def parse_header(raw, where):
        try:
            header = json.loads(raw, object_pairs_hook=tf._no_duplicates)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise tf._bad(where, f"its header is not JSON ({exc})") from None
        if not isinstance(header, dict):
            raise tf._bad(where, "its header is not an object")
        return header

    _replace(tf, "parse_header", parse_header)


@mutant("header_nesting_leaks", caught_by=[LOADERS, "-k", "deeply_nested_header"])
def _header_nesting_leaks() -> None:
    """A header nested too deep lets the parser's RecursionError through."""
    import soma.store.tensorfile as tf

    real = tf.parse_header

    def parse_header(raw, where):
        try:
            return real(raw, where)
        except tf.BadBlob as refusal:
            if "RecursionError" in str(refusal):
                raise RecursionError("maximum recursion depth exceeded") from None
            raise

    _replace(tf, "parse_header", parse_header)


@mutant("offsets_unchecked", caught_by=[LOADERS, "-k", "offsets_and_sizes"])
def _offsets_unchecked() -> None:
    """Each tensor checked alone: the ranges neither tile the data nor stay in the file."""
    import soma.store.tensorfile as tf

    def check_layout(header, start, size):
        entries = []
        for key, info in header.items():
            if key != "__metadata__":
                dtype, shape, begin, end = tf.check_entry(key, info)
                entries.append(tf.Entry(key, dtype, shape, start + begin, start + end))
        return entries

    _replace(tf, "check_layout", check_layout)


@mutant("strides_unchecked", caught_by=[LOADERS, "-k", "overflowing_dims"])
def _strides_unchecked() -> None:
    """A zero-size tensor's other dimensions go to torch unchecked (they hold no byte)."""
    import soma.store.tensorfile as tf

    def check_entry(key, info):
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in tf.DTYPES or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"tensor {key!r} is not described")
        if offsets[1] - offsets[0] != math.prod(shape) * tf.DTYPES[dtype].itemsize:
            raise ValueError(f"tensor {key!r}: its data_offsets span other bytes")
        return tf.DTYPES[dtype], tuple(shape), offsets[0], offsets[1]

    _replace(tf, "check_entry", check_entry)


@mutant("torch_errors_leak", caught_by=[LOADERS, "-k", "torch_refusing"])
def _torch_errors_leak() -> None:
    """What torch refuses while a tensor is made comes out as torch's own error."""
    import soma.store.tensorfile as tf

    def tensors_from(base, entries, where):
        return {e.key: tf._tensor_at(base, e, where) for e in entries}

    _replace(tf, "tensors_from", tensors_from)


# --- a backend's bounded reads (soma/store/backend.py) -------------------------------------


@mutant("tensor_read_unbounded", caught_by=[LOADERS, "-k", "300_mb or forged"])
def _tensor_read_unbounded() -> None:
    """A tensor blob read whole, whatever its header declares, then hashed."""
    import torch

    import soma.store.backend as backend

    def _read_tensor_file(self, digest, lazy=False):
        chunks = self.backend.read_blob(digest)
        if chunks is None:
            raise backend.UnknownDigest(f"no blob {digest} in {self}")
        data = bytearray()
        for chunk in chunks:
            data += chunk
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise backend.CorruptBlob(self.blob_path(digest), digest, actual)
        return torch.frombuffer(data, dtype=torch.uint8)

    _replace(backend.BackendStore, "_read_tensor_file", _read_tensor_file)


@mutant("record_read_uncapped", caught_by=[LOADERS, "-k", "substituted_record"])
def _record_read_uncapped() -> None:
    """A record read whole, then measured: no limit passed down or kept to."""
    import soma.store.backend as backend

    def _get_at_most(self, digest, limit):
        return self._read(digest)

    _replace(backend.BackendStore, "_get_at_most", _get_at_most)


@mutant("put_sizes_forgotten", caught_by=[LOADERS, "-k", "this_process_put"])
def _put_sizes_forgotten() -> None:
    """A blob this process put is read as if its size were not known."""
    import soma.store.backend as backend

    def _size_put(self, digest):
        return None

    _replace(backend.BackendStore, "_size_put", _size_put)


@mutant("folder_record_read_whole", caught_by=[LOADERS, "-k", "record_file_longer"])
def _folder_record_read_whole() -> None:
    """A folder's record read whole, then measured (the protocol's plain version)."""
    import soma.store.folder as folder
    from soma.store.values import Values

    _replace(folder.FolderStore, "_get_at_most", Values._get_at_most)
