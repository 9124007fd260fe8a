"""``jobrelay.Client`` and ``AsyncClient`` against the real API: a ``jobrelay api`` process on
real PostgreSQL, stopped and started again on the same port while a submission is retried."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import text

from jobrelay import ApiError, AsyncClient, Client, IdempotencyConflict, Job
from jobrelay.client import DuplicateJobError
from jobrelay.core.settings import Settings
from tests.support.processes import (
    Service,
    answers,
    free_port,
    run_cli,
    service_env,
    wait_for,
)

JS = {"course": "JavaScript"}
MD = {"course": "Markdown"}


class Api:
    """``jobrelay api`` on a port of its own that stays the same across restarts, and the
    token of a client created with ``jobrelay clients create``."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        port = free_port()
        self.env = service_env(settings, JOBRELAY_API_PORT=str(port))
        self.base = f"http://127.0.0.1:{port}"
        self.log = log_dir / "api.log"
        self.service: Service | None = None
        created = run_cli(self.env, "clients", "create", "shop", "--json")
        assert created.returncode == 0, created.stderr
        self.token = str(json.loads(created.stdout)["token"])

    def start(self) -> None:
        service = self.service = Service(["api"], self.env, self.log)
        wait_for(lambda: answers(self.base + "/healthz") or not service.alive(), 30, what="API")
        assert service.alive(), service.output()

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def client(self, *, retries: int = 5) -> Client:
        return Client(self.base, self.token, retries=retries)


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[Api]:
    api = Api(settings, tmp_path)
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def client(api: Api) -> Iterator[Client]:
    with api.client() as client:
        yield client


def stored(settings: Settings, key: str) -> tuple[int, int]:
    """(jobs, outbox rows) in the database for an idempotency key."""
    engine = sqlalchemy.create_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT count(DISTINCT j.id), count(o.id) FROM jobrelay.jobs j "
                    "LEFT JOIN jobrelay.outbox o ON o.job_id = j.id WHERE j.idempotency_key = :key"
                ),
                {"key": key},
            ).one()
    finally:
        engine.dispose()
    return int(row[0]), int(row[1])


def test_submit_returns_a_queued_job_and_the_same_key_returns_that_job_again(
    client: Client, settings: Settings
) -> None:
    job = client.submit("catalog.export", JS, key="export-js", max_attempts=5)
    again = client.submit("catalog.export", JS, key="export-js", max_attempts=5)

    assert isinstance(job, Job) and isinstance(job.id, uuid.UUID)
    assert (job.state, job.type, job.payload) == ("queued", "catalog.export", JS)
    assert (job.idempotency_key, job.attempts, job.max_attempts) == ("export-js", 0, 5)
    assert job.created_at.tzinfo is not None and job.links.self == f"/v1/jobs/{job.id}"
    assert again.id == job.id
    assert stored(settings, "export-js") == (1, 1)


def test_another_payload_under_a_used_key_raises_a_409_conflict_and_changes_nothing(
    client: Client, settings: Settings
) -> None:
    job = client.submit("catalog.export", JS, key="export-js")

    with pytest.raises(ApiError) as raised:
        client.submit("catalog.export", MD, key="export-js")

    error = raised.value
    assert (error.status, error.code) == (409, "idempotency_conflict")
    assert isinstance(error, IdempotencyConflict)
    assert client.get(job.id).payload == JS
    assert stored(settings, "export-js") == (1, 1)


def test_get_reads_a_job_and_cancel_cancels_it_once(client: Client) -> None:
    job = client.submit("demo.sleep", {"seconds": 0})

    assert client.get(job.id) == job
    assert client.get(str(job.id)).id == job.id
    cancelled = client.cancel(job.id)
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    assert client.get(job.id).state == "cancelled"

    with pytest.raises(ApiError) as again:
        client.cancel(job.id)
    assert (again.value.status, again.value.code) == (409, "not_cancellable")
    with pytest.raises(ApiError) as missing:
        client.get(uuid.uuid4())
    assert (missing.value.status, missing.value.code) == (404, "job_not_found")


def test_a_wrong_token_is_a_401_that_does_not_show_the_token(api: Api) -> None:
    wrong = "jr_not-a-token-of-anyone-0123456789"
    with Client(api.base, wrong) as client, pytest.raises(ApiError) as raised:
        client.submit("catalog.export", JS)
    assert (raised.value.status, raised.value.code) == (401, "unauthorized")
    assert wrong not in str(raised.value) and wrong not in repr(raised.value)


def test_jobs_iterates_over_every_page_with_the_filters(client: Client) -> None:
    exports = [client.submit("catalog.export", {"course": f"c{n}"}).id for n in range(52)]
    sleeps = [client.submit("demo.sleep", {"seconds": 0}).id for _ in range(3)]
    client.cancel(sleeps[0])

    every = [job.id for job in client.jobs()]  # the API's default page: 50
    small_pages = [job.id for job in client.jobs(page_size=7)]
    of_type = [job.id for job in client.jobs(type="catalog.export", page_size=10)]
    cancelled = list(client.jobs(state="cancelled", page_size=1))

    assert len(every) == len(set(every)) == 55
    assert set(every) == set(exports) | set(sleeps)
    assert small_pages == every  # newest first, the same order at any page size
    assert sorted(of_type) == sorted(exports)
    assert [job.id for job in cancelled] == [sleeps[0]]


async def test_the_async_client_submits_reads_lists_and_cancels(api: Api) -> None:
    async with AsyncClient(api.base, api.token) as client:
        job = await client.submit("catalog.export", JS, key="async-js")
        again = await client.submit("catalog.export", JS, key="async-js")
        with pytest.raises(IdempotencyConflict):
            await client.submit("catalog.export", MD, key="async-js")
        listed = [found.id async for found in client.jobs(page_size=1)]
        cancelled = await client.cancel(job.id)

    assert job.state == "queued" and again.id == job.id
    assert listed == [job.id]
    assert cancelled.state == "cancelled"


def test_a_submission_made_while_the_api_is_down_lands_once_when_it_is_back(
    api: Api, settings: Settings
) -> None:
    api.stop()
    waits: list[float] = []
    outcome: list[Job | BaseException] = []
    # More retries than the default (5: 8 to 16 s of waiting), so that a slow start of the
    # API stays within the budget: 20 to 40 s in all.
    client = api.client(retries=8)

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    client._sleep = sleep

    def submit() -> None:
        try:
            outcome.append(client.submit("catalog.export", JS, key="across-restart"))
        except BaseException as error:
            outcome.append(error)

    submitter = threading.Thread(target=submit)
    submitter.start()
    try:
        wait_for(lambda: len(waits) >= 2, 10, what="two refused tries")
        assert not outcome, outcome
        api.start()
    finally:
        submitter.join(60)
        client.close()

    assert len(outcome) == 1 and isinstance(outcome[0], Job), outcome
    job = outcome[0]
    assert job.state == "queued" and job.idempotency_key == "across-restart"
    assert stored(settings, "across-restart") == (1, 1)
    with api.client() as reader:
        assert [found.id for found in reader.jobs()] == [job.id]


def test_a_delayed_submission_and_a_batch(api: Api) -> None:
    from datetime import UTC, datetime, timedelta

    with api.client() as client:
        later = client.submit("catalog.export", JS, key="later", delay=timedelta(minutes=5))
        assert later.run_at is not None
        assert later.run_at > datetime.now(UTC) + timedelta(minutes=4)
        at = datetime(2030, 1, 1, tzinfo=UTC)
        assert client.submit("catalog.export", MD, run_at=at).run_at == at
        with pytest.raises(ValueError, match="time zone"):
            client.submit("catalog.export", JS, run_at=datetime(2030, 1, 1))
        answers = client.submit_many(
            [
                {"type": "catalog.export", "payload": JS, "key": "b1"},
                {"type": "catalog.export", "payload": MD, "key": "later"},  # another request
                {"type": "no.such.type", "payload": {}},
                {"type": "demo.sleep", "payload": {"seconds": 0}, "delay": 60},
            ]
        )
        assert isinstance(answers[0], Job) and answers[0].state == "queued"
        assert isinstance(answers[1], IdempotencyConflict) and answers[1].status == 409
        assert isinstance(answers[2], ApiError) and answers[2].code == "unknown_job_type"
        assert isinstance(answers[3], Job) and answers[3].run_at is not None
        # The same batch again: the same jobs (the keys were the caller's or are new).
        again = client.submit_many([{"type": "catalog.export", "payload": JS, "key": "b1"}])
        assert isinstance(again[0], Job) and again[0].id == answers[0].id


def test_the_policies_through_the_client_sequence_debounce_reject_and_a_bad_mix(
    client: Client,
) -> None:
    ahead = client.submit("catalog.export", JS, sequence_key="customer-1")
    behind = client.submit("catalog.export", MD, sequence_key="customer-1")
    first = client.submit("catalog.export", JS, unique_key="edit-1", debounce_seconds=30)
    debounced = client.submit("catalog.export", MD, unique_key="edit-1", debounce_seconds=30)
    client.submit("catalog.export", JS, unique_key="once-1", on_duplicate="reject")
    with pytest.raises(DuplicateJobError) as refused:
        client.submit("catalog.export", MD, unique_key="once-1", on_duplicate="reject")
    with pytest.raises(ApiError) as invalid:  # a window needs its unique key
        client.submit("catalog.export", JS, unique_for_seconds=60)
    [in_batch, refused_in_batch] = client.submit_many(
        [
            {"type": "catalog.export", "payload": JS, "sequence_key": "customer-1"},
            {
                "type": "catalog.export",
                "payload": MD,
                "unique_key": "once-1",
                "on_duplicate": "reject",
            },
        ]
    )

    assert (ahead.sequence_key, behind.sequence_key) == ("customer-1", "customer-1")
    assert ahead.state == behind.state == "queued" and behind.id != ahead.id
    assert debounced.debounced and debounced.id == first.id and debounced.payload == MD
    assert refused.value.job_id is not None and refused.value.status == 409
    assert (invalid.value.status, invalid.value.code) == (422, "invalid_policy")
    assert isinstance(in_batch, Job) and in_batch.sequence_key == "customer-1"
    assert isinstance(refused_in_batch, DuplicateJobError) and refused_in_batch.status == 409


def test_wait_returns_the_finished_job_or_times_out(api: Api, settings: Settings) -> None:
    with api.client() as client:
        job = client.submit("catalog.export", JS)
        # No consumer runs: the job stays queued, and only the timeout can end the wait.
        with pytest.raises(TimeoutError, match="still queued"):
            client.wait(job.id, timeout=0.5)

        def finish_soon() -> None:
            time.sleep(0.3)
            engine = sqlalchemy.create_engine(settings.database_url)
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "UPDATE jobrelay.jobs SET state = 'cancelled', finished_at = now() WHERE "
                        "id = :id"
                    ),
                    {"id": job.id},
                )
            engine.dispose()

        finisher = threading.Thread(target=finish_soon)
        finisher.start()
        done = client.wait(job.id, timeout=30)
        finisher.join()
        assert done.state == "cancelled" and done.finished
