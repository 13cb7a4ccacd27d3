"""Fixtures of the differential tests against a real redis-server."""

from tests.redis_diff.server import clean_redis, fresh_redis_server, redis_server

__all__ = ["clean_redis", "fresh_redis_server", "redis_server"]
