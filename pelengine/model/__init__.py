"""The pure Redis Streams consumer-group model: no pyspark, no pandas.

``Replayer`` applies logged commands one by one, exactly as Redis would, and
renders the state as rows of the output tables.
"""

from pelengine.model.ids import StreamID
from pelengine.model.replay import (
    PROFILES,
    Outcome,
    Profile,
    Replayer,
    get_profile,
    known_versions,
    resolve_profile,
)

__all__ = [
    "PROFILES",
    "Outcome",
    "Profile",
    "Replayer",
    "StreamID",
    "get_profile",
    "known_versions",
    "resolve_profile",
]
