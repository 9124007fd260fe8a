"""What the exact checks at claim cost (docs/flow-control.md, "Exact checks at claim"): not run
by the suite (not a test_ file); run it by name:

    python -m pytest -p no:cacheprovider tests/integration/bench_flow_claim.py -q -s

It times, on the test servers, claims of jobs one at a time through ``PgExecutionStore.claim``
(a group of one, as under a light load) and groups of 64 through ``CLAIM_JOBS``, for a type
without a limit (the group statement, with the pause check) and under a per-key concurrency
limit and a rate (the transaction of the exact checks), and prints the medians.
"""

from __future__ import annotations

import statistics
import time
import uuid

from jobrelay.core.execution import ClaimRules, LeaseTerms
from jobrelay.core.flow import Limit, Rate
from jobrelay.db import queries as q
from jobrelay.db.execution_store import PgExecutionStore, _ClaimRequest
from jobrelay.db.store import Store
from tests.support.consumer_kit import new_client, submit

ROUNDS = 300


async def _jobs(store: Store, n: int) -> list[uuid.UUID]:
    client_id = await new_client(store)
    return [await submit(store, client_id, "demo.sleep", {"seconds": 0}) for _ in range(n)]


async def _time_claims(store: Store, rules: ClaimRules | None) -> float:
    executions = PgExecutionStore(store)
    jobs = await _jobs(store, ROUNDS)
    times = []
    for job_id in jobs:
        started = time.perf_counter()
        await executions.claim(job_id, LeaseTerms.fresh(30), rules=rules)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def test_claim_costs(store: Store) -> None:
    unlimited = await _time_claims(store, None)
    per_key = ClaimRules(limited=True, code_limit=Limit(concurrency=100_000, per_key=True))
    concurrency = await _time_claims(store, per_key)
    rated = ClaimRules(limited=True, code_limit=Limit(rate=Rate(1_000_000, 1)))
    rate = await _time_claims(store, rated)
    print(f"\nclaim of one job, median of {ROUNDS}:")
    print(f"  unlimited (CLAIM_JOBS group of one)     {unlimited:.3f} ms")
    print(f"  concurrency per key (exact transaction) {concurrency:.3f} ms")
    print(f"  rate (exact transaction)                {rate:.3f} ms")


async def test_group_statement_cost_with_and_without_the_pause_check(store: Store) -> None:
    """CLAIM_JOBS for 64 jobs, as today and without its queue lock and runtime-limit guard
    (the statement of the previous landing, kept in the bench)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("old_queries", "/tmp/flow-claim-old-queries.py")
    assert spec and spec.loader
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    executions = PgExecutionStore(store)
    results: dict[str, list[float]] = {"before": [], "now": []}
    for round_ in range(40):
        for label in ("before", "now") if round_ % 2 else ("now", "before"):
            jobs = await _jobs(store, 64)
            requests = [_ClaimRequest(j, uuid.uuid4(), 30.0, "bench", None) for j in jobs]
            params = executions._claim_params(requests)
            statement = q.CLAIM_JOBS
            if label == "before":
                statement = old.CLAIM_JOBS
                params = {k: v for k, v in params.items() if k not in ("checked", "queue")}
            started = time.perf_counter()
            claimed = await store.fetch_all(statement, **params)
            results[label].append(time.perf_counter() - started)
            assert len(claimed) == 64
    print(f"\nCLAIM_JOBS, 64 jobs, median of {len(results['now'])}:")
    for label, times in results.items():
        print(f"  {label:7} {statistics.median(times) * 1000:.3f} ms")
