"""Which profile a server version gets: what the server reports is accepted as it is."""

from __future__ import annotations

import pytest

from pelengine.model import get_profile, known_versions, resolve_profile


@pytest.mark.parametrize(
    ("version", "profile"),
    [
        ("7.0", "7.0"),
        ("7.4", "7.4"),
        ("7.2", "7.2"),
        ("7.0.15", "7.0"),
        ("7.0.0", "7.0"),
        ("redis-7.0.15", "7.0"),
        ("7.2.4", "7.2"),
        ("7.4.1", "7.4"),
        ("valkey-8.0.1", "7.4"),
        ("valkey-8.1.8", "valkey-8.1"),
        ("Valkey 8.1.1", "valkey-8.1"),
        ("valkey-9.1.2", "valkey-8.1"),
        ("valkey_9.1", "valkey-8.1"),
        ("valkey-8.1", "valkey-8.1"),
    ],
)
def test_a_server_version_gets_its_profile(version: str, profile: str) -> None:
    assert get_profile(version).name == profile


# 7.4.2+ and Valkey 8.1.0 differ from both profiles in their lag estimates; 9.0 and 8.0.x
# of Redis were never run here
@pytest.mark.parametrize(
    "version", ["6.2.14", "8.0.2", "7.4.2", "valkey-8.1.0", "valkey-9.0.1", "valkey-7.2.5", "7"]
)
def test_an_unknown_version_is_refused_listing_what_is_known(version: str) -> None:
    with pytest.raises(ValueError, match="unknown Redis version") as info:
        get_profile(version)
    assert known_versions() in str(info.value)
    assert "valkey-9.1.x" in str(info.value) and "7.0" in str(info.value)


def test_the_reason_says_how_the_profile_is_known() -> None:
    assert "measured live against Valkey 9.1.2" in resolve_profile("valkey-9.1.2")[1]
    assert "measured live against Redis 7.0.15" in resolve_profile("7.0.15")[1]
    assert resolve_profile("7.4")[1] == "profile 7.4 named"
