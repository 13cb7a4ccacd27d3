"""Fixtures of the differential tests against the real servers (tests/redis_diff/server.py)."""

from tests.redis_diff.server import clean_redis, fresh_redis_server, redis_server, server_kind

__all__ = ["clean_redis", "fresh_redis_server", "redis_server", "server_kind"]
