"""Sequences (issue 41, item 1; SPEC section 22; docs/flow-control.md, "Sequences") against real
PostgreSQL and RabbitMQ, with a dispatcher and real consumers: the jobs of one client and
sequence key, of any types, run one at a time in the order they were accepted; a quarantined
job blocks its key (``blocked_by``, ``GET /v1/admin/sequences``) until it is replayed and
succeeds, or is cancelled; priorities never reorder a sequence.

Order is read from the journal: the database's clock dates a job's ``claimed`` and its
``succeeded``, each in its own transaction, so "job n+1 was claimed after job n succeeded" is
exact. The handlers of this process also record when they ran, to show no two of a key
overlapped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import text

from jobrelay.api.app import create_app
from jobrelay.core.errors import PermanentError
from jobrelay.core.jobs import Flow, JobRequest
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.db import queries as q
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth, make_client
from tests.integration.test_console import console_client, signed_in
from tests.support import factories
from tests.support.consumer_kit import new_client, rows, running_consumer, scalar, wait_states
from tests.support.outbox import running_dispatcher
from tests.support.processes import Service, run_cli, service_env
from tests.support.waiting import eventually

# --- the test's job types ---------------------------------------------------------------------


class Step(BaseModel):
    key: str
    seconds: float = 0.05
    gate: str = ""  # waits until the test opens this gate (GATES)
    poisoned: str = ""  # fails for good while this name is in POISONED


@dataclass(frozen=True)
class Run:
    key: str
    job_id: uuid.UUID
    started: float
    ended: float


RUNS: list[Run] = []  # what the handlers of this process ran
GATES: dict[str, asyncio.Event] = {}
POISONED: set[str] = set()


def sequence_registry() -> Registry:
    """Two types, so a sequence crosses types."""
    registry = Registry()

    async def step(context: JobContext, payload: Step) -> dict[str, Any]:
        started = time.monotonic()
        if payload.gate:
            await GATES.setdefault(payload.gate, asyncio.Event()).wait()
        if payload.poisoned in POISONED:
            raise PermanentError(f"{payload.poisoned} is poisoned")
        await asyncio.sleep(payload.seconds)
        RUNS.append(Run(payload.key, context.job_id, started, time.monotonic()))
        return {"key": payload.key}

    registry.job("seq.a", Step)(step)
    registry.job("seq.b", Step)(step)
    return registry


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    RUNS.clear()
    GATES.clear()
    POISONED.clear()


def open_gate(name: str) -> None:
    GATES.setdefault(name, asyncio.Event()).set()


@pytest.fixture
def cfg(make_settings: MakeSettings) -> Settings:
    return make_settings()


@asynccontextmanager
async def api_of(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The API in process, with the test's types and a reachable broker (a replay needs it)."""
    app = create_app(settings, store=store, registry=sequence_registry())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as client,
    ):
        yield client


@asynccontextmanager
async def running_system(
    settings: Settings, consumers: int = 1, concurrency: int = 8
) -> AsyncIterator[None]:
    """A dispatcher and ``consumers`` consumers of the test's types, in this event loop."""
    registry = sequence_registry()
    async with (
        running_dispatcher(settings),
        running_consumer(settings, registry, concurrency=concurrency),
        contextlib.AsyncExitStack() as more,
    ):
        for _ in range(consumers - 1):
            await more.enter_async_context(
                running_consumer(settings, registry, concurrency=concurrency)
            )
        yield


async def post_job(
    api: httpx.AsyncClient, token: str, job_type: str, key: str, **fields: Any
) -> uuid.UUID:
    """A submission of the sequence ``key`` (``fields``: its payload's and the body's)."""
    payload = {"key": key} | {k: v for k, v in fields.items() if k in Step.model_fields}
    body = {"type": job_type, "payload": payload, "sequence_key": key}
    body |= {k: v for k, v in fields.items() if k not in Step.model_fields}
    answer = await api.post("/v1/jobs", json=body, headers=auth(token, uuid.uuid4().hex))
    assert answer.status_code == 202, answer.text
    return uuid.UUID(answer.json()["id"])


async def job_view(api: httpx.AsyncClient, token: str, job_id: uuid.UUID) -> dict[str, Any]:
    answer = await api.get(f"/v1/jobs/{job_id}", headers=auth(token))
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


@dataclass(frozen=True)
class Turn:
    """A job of a sequence as the journal dates it: its place, its claims and its end."""

    job_id: uuid.UUID
    key: str
    sequence_no: int
    claims: tuple[datetime, ...]
    ended: datetime | None


async def turns(store: Store, jobs: Iterable[uuid.UUID]) -> dict[str, list[Turn]]:
    """The jobs by sequence key, in acceptance order (``sequence_no``)."""
    found = await rows(
        store,
        "SELECT j.id, j.sequence_key, j.sequence_no,"
        " array(SELECT e.at FROM jobrelay.job_journal e WHERE e.job_id = j.id"
        "       AND e.event = 'claimed' ORDER BY e.at) AS claims,"
        " (SELECT max(e.at) FROM jobrelay.job_journal e WHERE e.job_id = j.id"
        "  AND e.event IN ('succeeded', 'cancelled')) AS ended"
        " FROM jobrelay.jobs j WHERE j.id = ANY(:ids) ORDER BY j.sequence_no",
        ids=list(jobs),
    )
    by_key: dict[str, list[Turn]] = defaultdict(list)
    for row in found:
        turn = Turn(row.id, row.sequence_key, row.sequence_no, tuple(row.claims), row.ended)
        by_key[row.sequence_key].append(turn)
    return by_key


def out_of_turn(line: list[Turn]) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """The pairs of a sequence where a job was claimed before the one ahead of it had ended
    (a job ahead that was never claimed, a cancelled one, does not count as running)."""
    ran = [turn for turn in line if turn.claims]
    return [
        (ahead.job_id, behind.job_id)
        for ahead, behind in itertools.pairwise(ran)
        if ahead.ended is None or behind.claims[0] < ahead.ended
    ]


def overlapping_runs(runs: Iterable[Run]) -> int:
    """How many of the handler runs (of one key) started before the one before them ended."""
    ordered = sorted(runs, key=lambda run: run.started)
    return sum(1 for before, after in itertools.pairwise(ordered) if after.started < before.ended)


def runs_by_key() -> dict[str, list[Run]]:
    by_key: dict[str, list[Run]] = defaultdict(list)
    for run in RUNS:
        by_key[run.key].append(run)
    return by_key


async def admin_sequences(
    api: httpx.AsyncClient, token: str, query: str = ""
) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/admin/sequences{query}", headers=auth(token))
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, Any]] = answer.json()["sequences"]
    return listed


# --- order ---------------------------------------------------------------------------------------


async def test_a_key_s_jobs_across_two_types_run_one_at_a_time_in_acceptance_order(
    store: Store, cfg: Settings
) -> None:
    alice = await make_client(store, "alice")
    async with api_of(cfg, store) as api:
        jobs = [
            await post_job(api, alice, "seq.a" if n % 2 else "seq.b", "customer-7")
            for n in range(8)
        ]
        # Accepted before anything ran: only the first has an outbox row.
        waiting = await scalar(
            store,
            "SELECT count(*) FROM jobrelay.jobs WHERE id = ANY(:ids) AND sequence_waits",
            ids=jobs,
        )
        assert waiting == 7
        async with running_system(cfg):
            await wait_states(store, jobs, "succeeded")
    (line,) = (await turns(store, jobs)).values()
    assert [turn.job_id for turn in line] == jobs  # sequence_no: the order of acceptance
    assert all(len(turn.claims) == 1 for turn in line)
    assert out_of_turn(line) == []
    assert [run.job_id for run in sorted(RUNS, key=lambda run: run.started)] == jobs
    assert overlapping_runs(RUNS) == 0
    released = await scalar(
        store,
        "SELECT count(*) FROM jobrelay.job_journal WHERE job_id = ANY(:ids) AND event = 'released'",
        ids=jobs,
    )
    assert released == 7


async def test_two_consumers_run_many_keys_each_in_order_and_never_two_of_a_key_at_once(
    store: Store, cfg: Settings
) -> None:
    alice = await make_client(store, "alice")
    keys = [f"key-{n}" for n in range(6)]
    async with api_of(cfg, store) as api, running_system(cfg, consumers=2, concurrency=4):
        jobs = [
            await post_job(api, alice, job_type, key, seconds=0.05)
            for _ in range(5)
            for key in keys
            for job_type in ("seq.a", "seq.b")
        ]
        await wait_states(store, jobs, "succeeded", within=60)
    by_key = await turns(store, jobs)
    assert sorted(by_key) == keys
    assert {key: len(line) for key, line in by_key.items()} == dict.fromkeys(keys, 10)
    assert {key: out_of_turn(line) for key, line in by_key.items()} == {key: [] for key in keys}
    ran = runs_by_key()
    assert {key: overlapping_runs(ran[key]) for key in keys} == dict.fromkeys(keys, 0)
    for key, line in by_key.items():  # each key's handler runs in its acceptance order
        started = [run.job_id for run in sorted(ran[key], key=lambda run: run.started)]
        assert started == [turn.job_id for turn in line], key


async def test_priorities_never_reorder_a_sequence(store: Store, cfg: Settings) -> None:
    alice = await make_client(store, "alice")
    async with api_of(cfg, store) as api, running_system(cfg):
        head = await post_job(api, alice, "seq.a", "k", gate="head")
        low = await post_job(api, alice, "seq.a", "k", priority=0)
        high = await post_job(api, alice, "seq.b", "k", priority=10)
        other = await post_job(api, alice, "seq.b", "elsewhere", priority=10)
        await wait_states(store, [other], "succeeded")  # another key is not held
        open_gate("head")
        await wait_states(store, [head, low, high], "succeeded")
    (line,) = (await turns(store, [head, low, high])).values()
    assert [turn.job_id for turn in line] == [head, low, high]
    assert out_of_turn(line) == []


# --- a consumer killed ------------------------------------------------------------------------


async def test_a_consumer_killed_in_a_sequence_s_job_the_next_waits_until_its_rerun_succeeded(
    store: Store, make_settings: MakeSettings, tmp_path: Path
) -> None:
    """The head runs in a consumer process that is killed; the job is claimed again once its
    lease expired, and the job behind it starts only after that second attempt succeeded."""
    cfg = make_settings(lease_seconds=2.0)
    client_id = await new_client(store)

    async def accept(payload: dict[str, Any]) -> uuid.UUID:
        request = JobRequest(
            uuid.uuid4().hex, "test.count", payload, 3, flow=Flow(sequence_key="k")
        )
        return (await store.accept_job(client_id, request)).job.id

    head = await accept({"tag": "head", "first_attempt_sleeps": 60})
    behind = await accept({"tag": "behind"})
    async with running_dispatcher(cfg):
        env = service_env(cfg, JOBRELAY_HANDLERS="tests.support.consumer_kit:registry")
        killed = Service(["consumer", "--concurrency", "2"], env, tmp_path / "consumer.log")
        try:

            async def running() -> bool:
                state = await scalar(
                    store, "SELECT state FROM jobrelay.jobs WHERE id = :id", id=head
                )
                return bool(state == "running")

            await eventually(running, within=30, what="the head to run")
            killed.kill()
        finally:
            killed.stop()
        assert await scalar(
            store, "SELECT sequence_waits FROM jobrelay.jobs WHERE id = :id", id=behind
        )
        async with running_consumer(cfg, concurrency=2):
            await wait_states(store, [head, behind], "succeeded")
    line = (await turns(store, [head, behind]))["k"]
    assert len(line[0].claims) == 2  # claimed again after the kill
    assert len(line[1].claims) == 1
    assert out_of_turn(line) == []
    assert line[1].claims[0] > line[0].claims[1]  # not in the gap between the head's claims


# --- blocked by a quarantined job -------------------------------------------------------------


async def test_a_quarantined_job_blocks_its_key_until_replayed_or_cancelled(
    store: Store, cfg: Settings
) -> None:
    alice = await make_client(store, "alice")
    admin = await make_client(store, "ops", admin=True)
    POISONED.update({"replayed", "cancelled"})
    async with api_of(cfg, store) as api, running_system(cfg):
        blocker = await post_job(api, alice, "seq.a", "replayed", poisoned="replayed")
        behind = [await post_job(api, alice, "seq.b", "replayed") for _ in range(3)]
        other = await post_job(api, alice, "seq.a", "cancelled", poisoned="cancelled")
        other_behind = [await post_job(api, alice, "seq.a", "cancelled") for _ in range(2)]
        flowing = await post_job(api, alice, "seq.a", "flowing", gate="flowing")
        await post_job(api, alice, "seq.a", "flowing")
        await wait_states(store, [blocker, other], "quarantined")

        views = [await job_view(api, alice, job_id) for job_id in behind]
        assert [(view["state"], view["blocked_by"]) for view in views] == [
            ("queued", str(blocker))
        ] * 3
        assert {view["sequence_key"] for view in views} == {"replayed"}
        assert (await job_view(api, alice, blocker))["blocked_by"] is None
        assert await admin_sequences(api, admin) == [
            {"client": "alice", "key": "replayed", "blocked_by": str(blocker), "waiting": 3},
            {"client": "alice", "key": "cancelled", "blocked_by": str(other), "waiting": 2},
            {"client": "alice", "key": "flowing", "blocked_by": None, "waiting": 1},
        ]
        blocked = await admin_sequences(api, admin, "?blocked=true&limit=1")
        assert [(entry["key"], entry["waiting"]) for entry in blocked] == [("replayed", 3)]
        forbidden = await api.get("/v1/admin/sequences", headers=auth(alice))
        assert forbidden.status_code == 403

        POISONED.clear()
        replayed = await api.post(f"/v1/admin/jobs/{blocker}/replay", headers=auth(admin))
        assert replayed.status_code == 200, replayed.text
        await wait_states(store, [blocker, *behind], "succeeded")
        cancelled = await api.post(f"/v1/jobs/{other}/cancel", headers=auth(alice))
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        await wait_states(store, other_behind, "succeeded")
        assert await admin_sequences(api, admin, "?blocked=true") == []
        open_gate("flowing")
        await wait_states(store, [flowing], "succeeded")
        assert await admin_sequences(api, admin) == []
    by_key = await turns(store, [blocker, *behind, other, *other_behind])
    assert out_of_turn(by_key["replayed"]) == []
    assert [turn.job_id for turn in by_key["replayed"]] == [blocker, *behind]
    assert len(by_key["replayed"][0].claims) == 2  # its first run, then the replay's
    assert out_of_turn(by_key["cancelled"]) == []


async def test_the_cancel_of_a_waiting_job_in_the_middle_keeps_the_rest_in_line(
    store: Store, cfg: Settings
) -> None:
    alice = await make_client(store, "alice")
    async with api_of(cfg, store) as api, running_system(cfg):
        head = await post_job(api, alice, "seq.a", "k", gate="head")
        first, middle, last = [await post_job(api, alice, "seq.b", "k") for _ in range(3)]
        await wait_states(store, [head], "running")
        cancelled = await api.post(f"/v1/jobs/{middle}/cancel", headers=auth(alice))
        assert cancelled.status_code == 200, cancelled.text
        waiting = await rows(
            store,
            "SELECT id, state, sequence_waits FROM jobrelay.jobs WHERE id = ANY(:ids)",
            ids=[first, last],
        )
        assert {(row.state, row.sequence_waits) for row in waiting} == {("queued", True)}
        open_gate("head")
        await wait_states(store, [head, first, last], "succeeded")
    (line,) = (await turns(store, [head, first, middle, last])).values()
    assert [turn.job_id for turn in line] == [head, first, middle, last]
    assert line[2].claims == ()  # the cancelled one never ran
    assert out_of_turn(line) == []


# --- racing submissions -----------------------------------------------------------------------


async def test_two_submissions_of_a_key_racing_get_a_total_order_and_run_one_at_a_time(
    store: Store, cfg: Settings
) -> None:
    alice = await make_client(store, "alice")
    jobs: list[uuid.UUID] = []
    async with api_of(cfg, store) as api, running_system(cfg, consumers=2, concurrency=4):
        for _ in range(15):  # racing one another and the releases of the jobs that end
            pair = await asyncio.gather(
                post_job(api, alice, "seq.a", "race", seconds=0.01),
                post_job(api, alice, "seq.b", "race", seconds=0.01),
            )
            jobs.extend(pair)
        await wait_states(store, jobs, "succeeded", within=60)
    (line,) = (await turns(store, jobs)).values()
    assert len({turn.sequence_no for turn in line}) == len(jobs) == 30
    assert all(len(turn.claims) == 1 for turn in line)
    assert out_of_turn(line) == []
    assert overlapping_runs(RUNS) == 0
    started = [run.job_id for run in sorted(RUNS, key=lambda run: run.started)]
    assert started == [turn.job_id for turn in line]


# --- what operators see -----------------------------------------------------------------------


async def line_of(
    store: Store, client_id: uuid.UUID, key: str, head_state: str, waiting: int
) -> list[uuid.UUID]:
    """A sequence as accepts and releases leave it: its head in ``head_state``, ``waiting``
    jobs behind it (``sequence_waits``, no outbox row)."""
    (head,) = await factories.jobs(
        store, 1, client_id=client_id, state=head_state, sequence_key=key, sequence_no=1
    )
    behind = [
        (
            await factories.job(
                store,
                client_id=client_id,
                sequence_key=key,
                sequence_no=n,
                sequence_waits=True,
            )
        ).id
        for n in range(2, waiting + 2)
    ]
    return [head.id, *behind]


async def test_the_admin_list_the_cli_and_the_console_show_the_waiting_sequences(
    store: Store, cfg: Settings
) -> None:
    shop = await factories.client(store, name="shop")
    crm = await factories.client(store, name="crm")
    admin = await make_client(store, "ops", admin=True)
    shop_blocker, *shop_behind = await line_of(store, shop.id, "blocked", "quarantined", 2)
    crm_blocker, _ = await line_of(store, crm.id, "blocked", "quarantined", 1)
    await line_of(store, shop.id, "flowing", "running", 3)
    await line_of(store, shop.id, "alone", "quarantined", 0)  # nothing waits: not listed
    await factories.jobs(store, 5, client_id=shop.id)  # plain jobs: never listed
    expected = [
        {"client": "shop", "key": "blocked", "blocked_by": str(shop_blocker), "waiting": 2},
        {"client": "crm", "key": "blocked", "blocked_by": str(crm_blocker), "waiting": 1},
        {"client": "shop", "key": "flowing", "blocked_by": None, "waiting": 3},
    ]
    async with api_of(cfg, store) as api:
        assert await admin_sequences(api, admin) == expected
        assert await admin_sequences(api, admin, "?blocked=true") == expected[:2]
        assert await admin_sequences(api, admin, "?limit=1") == expected[:1]
        for wrong in ("?limit=0", "?limit=1001", "?blocked=maybe"):
            refused = await api.get(f"/v1/admin/sequences{wrong}", headers=auth(admin))
            assert refused.status_code == 422, (wrong, refused.text)
            assert refused.headers["content-type"] == "application/problem+json"

    env = service_env(cfg)
    listed = run_cli(env, "sequences", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"sequences": expected}
    table = run_cli(env, "sequences", "list", "--blocked").stdout.splitlines()
    assert [line.split() for line in table] == [
        ["CLIENT", "KEY", "WAITING", "BLOCKED", "BY"],
        ["shop", "blocked", "2", str(shop_blocker)],
        ["crm", "blocked", "1", str(crm_blocker)],
    ]
    wrong = run_cli(env, "sequences", "list", "--limit", "0")
    assert wrong.returncode != 0 and wrong.stdout == ""
    assert wrong.stderr.strip().splitlines() == [
        "jobrelay: --limit must be between 1 and 1000, not 0"
    ]

    async with console_client(cfg, store) as console:
        await signed_in(console, admin)
        page = await console.get("/ui/sequences")
        assert page.status_code == 200, page.text
        assert page.text.count('href="/ui/jobs/') == 2
        assert f'href="/ui/jobs/{shop_blocker}"' in page.text
        assert f'href="/ui/jobs/{crm_blocker}"' in page.text
        assert "<code>flowing</code>" in page.text and "<code>alone</code>" not in page.text
        assert 'href="/ui/sequences"' in page.text  # the nav link
        blocked_only = await console.get("/ui/sequences?blocked=true")
        assert "<code>flowing</code>" not in blocked_only.text
        waiting_page = await console.get(f"/ui/jobs/{shop_behind[0]}")
        assert "<dt>blocked by</dt>" in waiting_page.text
        assert f'<a class="mono" href="/ui/jobs/{shop_blocker}">' in waiting_page.text
        blocker_page = await console.get(f"/ui/jobs/{shop_blocker}")
        assert f'action="/ui/jobs/{shop_blocker}/cancel"' in blocker_page.text
        assert 'action="/ui/quarantine/replay"' in blocker_page.text
    async with console_client(cfg, store) as stranger:
        assert (await stranger.get("/ui/sequences")).status_code == 303  # to the sign-in


async def test_the_list_of_sequences_reads_no_plain_job(store: Store) -> None:
    """With 10,000 plain jobs and a few of sequences, WAITING_SEQUENCES goes through the
    partial index of the sequences' unfinished jobs: no scan of ``jobs``."""
    client = await factories.client(store, name="shop")
    for _ in range(4):
        await factories.jobs(store, 2_500, client_id=client.id)
    await line_of(store, client.id, "blocked", "quarantined", 3)
    await line_of(store, client.id, "flowing", "running", 2)
    await store.fetch_all(text("ANALYZE jobrelay.jobs"))
    async with store.transaction() as connection:
        explained = await connection.execute(
            text(f"EXPLAIN {q.WAITING_SEQUENCES.text}"), {"blocked": False, "limit": 100}
        )
        plan = "\n".join(row[0] for row in explained)
    assert "Seq Scan on jobs" not in plan, plan
    assert plan.count("ix_jobs_sequence_unfinished") == 2, plan  # the lines and their heads
    print(plan)  # for the record (pytest -s)


async def test_retention_keeps_a_quarantined_job_while_jobs_wait_behind_it(store: Store) -> None:
    """JOBRELAY_QUARANTINE_RETENTION_HOURS deletes old quarantined jobs, but not a blocker with
    jobs waiting behind it: gone, it could be neither replayed nor cancelled, and nothing
    would ever release them."""
    client = await factories.client(store, name="shop")
    blocker, *behind = await line_of(store, client.id, "blocked", "quarantined", 2)
    alone, *_ = await line_of(store, client.id, "alone", "quarantined", 0)
    (plain,) = await factories.jobs(store, 1, client_id=client.id, state="quarantined")
    long_ago = datetime.now(UTC) - timedelta(days=30)
    await factories.set_job(store, [blocker, alone, plain.id], finished_at=long_ago)

    deleted = await RelayStore(store).delete_finished_jobs(JobState.QUARANTINED, 3600, 100)

    assert deleted == 2
    left = await rows(
        store,
        "SELECT id FROM jobrelay.jobs WHERE id = ANY(:ids)",
        ids=[blocker, alone, plain.id, *behind],
    )
    assert {row.id for row in left} == {blocker, *behind}


async def test_a_database_not_migrated_to_sequences_is_one_line_not_a_traceback(
    store: Store, settings: Settings
) -> None:
    await store.fetch_all(text("ALTER TABLE jobrelay.jobs DROP COLUMN sequence_waits"))
    listed = run_cli(service_env(settings), "sequences", "list")
    assert listed.returncode == 1
    assert listed.stderr.strip().splitlines() == [
        "jobrelay: the database has no sequences yet (revision 0019): run jobrelay migrate"
    ]
