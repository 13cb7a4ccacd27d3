"""The one settings object of a run: built once at the entry point, passed down.

Entry points (``pelengine.cli``, ``jobs/``) turn their arguments and the configuration
into one frozen :class:`Settings`; the runs, the pipeline stages and the engine's UDF
factory read it and nothing else. Building it resolves the server profile (a version
as the server reports it, or a profile name) once and checks the options once, so a
bad value fails before any Spark work starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from pelengine.model import Profile, resolve_profile

# the replay engines a run may ask for (pelengine.engine.native resolves them)
ENGINES = ("auto", "native", "python")


class SettingsError(ValueError):
    """The options of a run contradict each other or are out of range."""


@dataclass(frozen=True)
class Settings:
    """What to reconstruct and how (see the CLI's ``reconstruct`` for each option).

    ``profile`` is kept as given (the run report shows it); :attr:`model_profile` is the
    resolved :class:`~pelengine.model.replay.Profile` and :attr:`profile_reason` says
    how the version was mapped to it."""

    profile: str = "7.0"
    as_of_ms: int | None = None
    as_of_seq: int | None = None
    txn_app_id: str | None = None
    txn_version: int | None = None
    partitions: int | None = None
    # the server's stream-node-max-entries / stream-node-max-bytes ('~' trimming)
    node_max_entries: int = 100
    node_max_bytes: int = 4096
    # replay a family with at least this many consumer groups as one task per group
    # (0: never; see pelengine.pipeline.route.split_by_group)
    split_groups: int = 0
    # incremental runs: keep each family's model as state (see pelengine.runs.incremental)
    incremental: bool = False
    # the replay engine: auto (native when importable), native, python (see
    # pelengine.engine.native; resolved once per run by the pipeline)
    engine: str = "auto"

    def __post_init__(self) -> None:
        resolved = resolve_profile(self.profile)  # ValueError naming the known versions
        object.__setattr__(self, "_resolved", resolved)
        for name in ("node_max_entries", "node_max_bytes", "split_groups"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise SettingsError(f"{name} must be an integer >= 0, got {value!r}")
        if self.partitions is not None and self.partitions < 1:
            raise SettingsError(f"partitions must be >= 1, got {self.partitions!r}")
        if self.engine not in ENGINES:
            raise SettingsError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.incremental and (self.as_of_ms is not None or self.as_of_seq is not None):
            raise SettingsError("--incremental cannot be combined with --as-of-ms/--as-of-seq")

    @property
    def model_profile(self) -> Profile:
        """The model profile the replay follows."""
        profile: Profile = self._resolved[0]  # type: ignore[attr-defined]
        return profile

    @property
    def profile_name(self) -> str:
        """The profile's name ("7.0", "7.4", "valkey-8.1", ...)."""
        return self.model_profile.name

    @property
    def profile_reason(self) -> str:
        """How the given version maps to the profile."""
        reason: str = self._resolved[1]  # type: ignore[attr-defined]
        return reason
