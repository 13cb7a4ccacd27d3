"""Paths and URIs: the one rule for what is a local path."""

from __future__ import annotations


def local_path(uri: str) -> str | None:
    """The one rule for local paths: the filesystem path of a plain path or a ``file:``
    URI (``file:///x``, ``file:/x``), None for any other URI (``s3://``, ``abfss://``...)."""
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if uri.startswith("file:"):
        return uri[len("file:") :]
    if "://" in uri:
        return None
    return uri


#: Reader option of the embedded source: read only these data files of the snapshot (a JSON
#: list of their paths relative to the table, decoded: the log's paths URL-decoded, as
#: delta-rs lists them). delta-spark is never given it.
FILES_OPTION = "pelengine.files"
