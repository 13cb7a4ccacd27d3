"""Which SELECT arguments select a db: ``model.routing.db_index`` (and the Spark
stage's pattern) against what each live server accepts. Rows without ``db`` take the db
of the latest SELECT that selected one (docs/input.md, "db")."""

from __future__ import annotations

import pytest
import redis

from pelengine.model.routing import db_index
from tests.redis_diff.server import RedisServer

pytestmark = pytest.mark.redis

ARGUMENTS = ["0", "3", "15", " 1", "1 ", "+1", "-0", "01", "1.0", "1e0", "two", "", "\x7f1", "١"]


def test_select_arguments_as_the_server_reads_them(redis_server: RedisServer) -> None:
    client = redis_server.client()
    for text in ARGUMENTS:
        try:
            client.execute_command("SELECT", text)
            server = int(text)
        except redis.ResponseError:
            server = None
        assert db_index(text) == server, (text, redis_server.describe())
    # past the server's 16 dbs it is refused too, but a log can only hold one the
    # server it came from had: every int is kept
    assert db_index("2147483647") == 2147483647
    assert db_index("2147483648") is None
