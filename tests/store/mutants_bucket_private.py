"""Broken variants of what keeps `soma bucket serve`'s server to its owner (registered into
tests/mutants.py's MUTANTS): each opens one door the server's S3 credentials do not guard."""

from __future__ import annotations

from mutants import _replace, mutant

# the file: what `start` hands the server, in this process, first (-x stops there), then the
# server started and knocked on
_PRIVATE = ["tests/store/test_local_bucket_private.py"]


@mutant("bucket_filer_and_master_http_on", caught_by=_PRIVATE)
def _bucket_filer_and_master_http_on() -> None:
    """The master's and the filer's HTTP left on: the master hands anybody on the machine a
    file id to write, and deletes the bucket's volumes on a GET of /col/delete."""
    import soma.store.s3.local_bucket as local_bucket

    real = local_bucket.server_command

    def server_command(folder, port, ports, *, http=True):
        return real(folder, port, ports, http=True)

    _replace(local_bucket, "server_command", server_command)


@mutant("bucket_internal_ports_without_secrets", caught_by=_PRIVATE)
def _bucket_internal_ports_without_secrets() -> None:
    """No certificate for the gRPC ports, no keys for the volume server: each serves anybody."""
    import soma.store.s3.local_bucket as local_bucket

    _replace(local_bucket, "internal_security", lambda folder: {})


@mutant("bucket_folder_left_open", caught_by=_PRIVATE)
def _bucket_folder_left_open() -> None:
    """The data folder left as it was made (0755): anybody on the machine reads the data."""
    import soma.store.s3.local_bucket as local_bucket

    _replace(local_bucket, "private_folder", lambda folder: folder.mkdir(exist_ok=True))
