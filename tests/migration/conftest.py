"""The migration tier's database: an empty one per test, which the test migrates itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import databases
from tests.support.servers import Servers


@pytest.fixture
def empty_database(servers: Servers) -> Iterator[str]:
    url = databases.create_empty_database(servers.database_url, "jobrelay_mig")
    yield url
    databases.drop_database(servers.database_url, url)
