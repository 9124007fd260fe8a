"""PostgreSQL's own time for the statements migration 0017 and FINISH_PLAIN_JOBS change, by
EXPLAIN ANALYZE (server time only: no client, no round trip, so a busy machine blurs it less
than an end-to-end run):

    python scripts/servers.py run -- python -m benchmarks.finish_cost [--runs 150] [--group 32]

- a group of ``--group`` plain running jobs finished with success, by FINISH_JOBS and by
  FINISH_PLAIN_JOBS, each rolled back so the same rows finish again;
- a renewal-like UPDATE of one running job (no finished state touched), which the statement
  count triggers of 0017 are called for and the row triggers of 0016 were not;

each on a scratch database at revision 0016 (row count triggers) and one at 0017 (statement
count triggers), alternated. Reads JOBRELAY_DATABASE_URL (admin: creates and drops them).
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from sqlalchemy import Engine, create_engine, text

from jobrelay.db import queries as q
from tests.support import databases

REVISIONS = ("0016", "0017")
FILL = """
WITH c AS (INSERT INTO jobrelay.clients (id, name, token_hash)
           VALUES (gen_random_uuid(), 'bench', 'h') RETURNING id)
INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
    max_attempts, state, attempts, lease_token, lease_until)
SELECT gen_random_uuid(), c.id, 'k' || i, 'h', 'demo.sleep', '{}', 3, 'running', 1,
       gen_random_uuid(), now() + interval '1 day'
FROM c, generate_series(1, :n) AS i
"""
RENEW = text(
    "EXPLAIN (ANALYZE, FORMAT JSON) UPDATE jobrelay.jobs "
    "SET lease_until = now() + interval '1 day' WHERE id = :id AND state = 'running'"
)


def finish_params(engine: Engine, n: int) -> dict[str, list[Any]]:
    with engine.begin() as connection:
        connection.execute(text(FILL), {"n": n})
        rows = connection.execute(text("SELECT id, lease_token FROM jobrelay.jobs")).all()
    return {
        "ids": [row.id for row in rows],
        "lease_tokens": [row.lease_token for row in rows],
        "targets": ["succeeded"] * n,
        "results": ['{"ok": true}'] * n,
        "retry_delays": [None] * n,
        "error_codes": [None] * n,
        "errors": [None] * n,
        "failures": [None] * n,
    }


def explained(engine: Engine, statement: Any, params: dict[str, Any]) -> tuple[float, float]:
    """Execution time and the triggers' share of it (ms), the statement rolled back."""
    with engine.connect() as connection:
        plan = connection.execute(statement, params).scalar_one()[0]
        connection.rollback()
    return plan["Execution Time"], sum(t["Time"] for t in plan.get("Triggers", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--group", type=int, default=32)
    args = parser.parse_args()
    admin = os.environ["JOBRELAY_DATABASE_URL"]
    made: dict[str, tuple[str, Engine, dict[str, list[Any]]]] = {}
    statements = {
        name: text("EXPLAIN (ANALYZE, FORMAT JSON) " + getattr(q, name).text)
        for name in ("FINISH_JOBS", "FINISH_PLAIN_JOBS")
    }
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for revision in REVISIONS:
            url = databases.create_empty_database(admin, "jobrelay_finish_cost")
            databases.migrate(url, revision)
            engine = create_engine(url, connect_args={"options": "-c synchronous_commit=off"})
            made[revision] = (url, engine, finish_params(engine, args.group))
        for run in range(args.runs):
            for revision, (_, engine, params) in made.items():
                for name, statement in statements.items():
                    times.setdefault((revision, name), []).append(
                        explained(engine, statement, params)
                    )
                one = {"id": params["ids"][run % args.group]}
                times.setdefault((revision, "renewal"), []).append(explained(engine, RENEW, one))
    finally:
        for url, engine, _ in made.values():
            engine.dispose()
            databases.drop_database(admin, url)
    print(f"median of {args.runs} runs; finishes: a group of {args.group} plain jobs")
    for (revision, name), pairs in sorted(times.items(), key=lambda item: item[0][::-1]):
        execution = statistics.median(pair[0] for pair in pairs)
        triggers = statistics.median(pair[1] for pair in pairs)
        print(f"  {revision}  {name:18} {execution:8.3f} ms, of which triggers {triggers:.3f} ms")


if __name__ == "__main__":
    main()
