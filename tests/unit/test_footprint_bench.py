"""benchmarks/footprint.py's arithmetic: the deltas between two statistics snapshots and the
reading of pg_waldump's lines (the lines as PostgreSQL 15's pg_waldump prints them)."""

from __future__ import annotations

from benchmarks.footprint import Snapshot, difference, summarize_waldump

HEAD = "len (rec/tot): {}, tx: 751, lsn: 0/0190B2E8, prev 0/0190B2B0, desc:"
WALDUMP = "\n".join(
    [
        f"rmgr: Heap        {HEAD.format('79/   231')} INSERT off 3 flags 0x00, "
        "blkref #0: rel 1663/16384/16390 blk 0 FPW",
        f"rmgr: Btree       {HEAD.format('64/    64')} INSERT_LEAF off 2, "
        "blkref #0: rel 1663/16384/16395 blk 1",
        f"rmgr: Heap        {HEAD.format('54/    54')} LOCK off 3: xid 752: flags 0x00 "
        "LOCK_ONLY EXCL_LOCK , blkref #0: rel 1663/5/2619 blk 9",
        f"rmgr: Transaction {HEAD.format('34/    34')} COMMIT 2026-12-05 10:44:01.123456 UTC",
        "pg_waldump: error: error in WAL record at 0/0190B470: invalid record length",
    ]
)


def test_the_waldump_lines_are_summed_by_kind_and_by_relation_of_the_database() -> None:
    names = {"16390": "jobrelay.jobs", "16395": "jobrelay.pk_jobs"}

    summary = summarize_waldump(WALDUMP, "16384", names)

    assert summary["bytes"] == 231 + 64 + 54 + 34
    assert summary["full_page_image_bytes"] == 231 - 79
    assert summary["write_commits"] == 1
    assert summary["by_kind"][0] == ["Heap INSERT", 231, 1]
    assert dict(summary["by_relation"]) == {
        "jobrelay.jobs": 231,
        "jobrelay.pk_jobs": 64,
        "(database 5)": 54,
        "(none: Transaction)": 34,
    }


def test_the_difference_keeps_the_tables_written_and_adds_up_the_autovacuum_runs() -> None:
    before = Snapshot({"jobs": (10, 4, 0, 1, 0, 0), "clients": (1, 0, 0, 0, 0, 0)}, 100, "0/1", 3)
    after = Snapshot(
        {"jobs": (30, 44, 0, 11, 1, 1), "clients": (1, 0, 0, 0, 0, 0), "outbox": (20,) + (0,) * 5},
        150,
        "0/2",
        3,
    )

    rows, autovacuums = difference(before, after)

    assert rows == {
        "jobs": {"ins": 20, "upd": 40, "del": 0, "hot_upd": 10},
        "outbox": {"ins": 20, "upd": 0, "del": 0, "hot_upd": 0},
    }
    assert autovacuums == 2
