"""The failover profile's pure parts: its fault schedule and the proxied multi-host URL."""

from __future__ import annotations

import random
from collections import Counter

from chaos.faults import PRIMARY_FAULTS, Fault, database_proxy_names, schedule
from chaos.runner import PROFILES
from chaos.system import database_hosts, with_hosts

MULTI_HOST = (
    "postgresql+psycopg://jobrelay:secret@127.0.0.1:5001,127.0.0.1:5002/jobrelay"
    "?target_session_attrs=read-write"
)


def planned_kinds(profile_name: str, seed: int) -> Counter[Fault]:
    profile = PROFILES[profile_name]
    planned = schedule(
        random.Random(seed),
        profile.faults,
        profile.load_seconds,
        primary_faults=profile.primary_faults,
    )
    return Counter(fault.fault for fault in planned)


def test_the_long_failover_profile_takes_turns_at_the_three_primary_faults() -> None:
    kinds = planned_kinds("pg-failover", 7)
    assert PROFILES["pg-failover"].jobs >= 10_000
    assert [kinds[kind] for kind in PRIMARY_FAULTS] == [4, 4, 4]


def test_the_short_failover_profile_has_one_primary_fault_of_each_kind() -> None:
    kinds = planned_kinds("pg-failover-short", 1)
    assert [kinds[kind] for kind in PRIMARY_FAULTS] == [1, 1, 1]


def test_with_primary_faults_the_lone_server_is_never_restarted() -> None:
    planned = schedule(random.Random(3), 200, 100.0, primary_faults=3)
    assert Fault.PG_RESTART not in {fault.fault for fault in planned}
    assert Fault.PG_RESTART in {fault.fault for fault in schedule(random.Random(3), 200, 100.0)}


def test_a_multi_host_url_is_proxied_host_by_host_keeping_credentials_and_query() -> None:
    assert database_hosts(MULTI_HOST) == [("127.0.0.1", 5001), ("127.0.0.1", 5002)]
    proxied = with_hosts(MULTI_HOST, [("127.0.0.1", 6001), ("127.0.0.1", 6002)])
    assert proxied == MULTI_HOST.replace("5001", "6001").replace("5002", "6002")
    assert database_hosts("postgresql://u:p@db/x") == [("db", 5432)]


def test_a_database_fault_names_every_proxy_of_a_cluster() -> None:
    assert database_proxy_names(1) == ["db"]
    assert database_proxy_names(2) == ["db1", "db2"]
