"""The pure Redis Streams consumer-group model: no pyspark, no pandas.

``Replayer`` applies logged commands one by one, exactly as Redis would;
``snapshot_tables`` (``pelengine.model.snapshot``) renders its state as rows of the
output tables.
"""

from pelengine.model.calls import Profile
from pelengine.model.ids import StreamID
from pelengine.model.replay import (
    PROFILES,
    Outcome,
    Replayer,
    get_profile,
    known_versions,
    resolve_profile,
)
from pelengine.model.snapshot import snapshot_columns, snapshot_tables

__all__ = [
    "PROFILES",
    "Outcome",
    "Profile",
    "Replayer",
    "StreamID",
    "get_profile",
    "known_versions",
    "resolve_profile",
    "snapshot_columns",
    "snapshot_tables",
]
