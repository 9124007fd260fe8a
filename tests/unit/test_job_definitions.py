"""What ``@registry.job`` returns (``core/registry.py::JobDefinition``): still the handler to
call, and the way to enqueue jobs of its type through ``jobrelay.configure`` (a client, or
``jobrelay.enqueue`` on the caller's connection)."""

from __future__ import annotations

import copy
import inspect
import pickle
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

import jobrelay
from jobrelay import JobContext, Registry
from jobrelay.core.errors import InvalidPayload
from jobrelay.core.registry import (
    JobDefinition,
    NotConfigured,
    install_enqueuer,
    is_async_handler,
)
from jobrelay.testing import Recorder, make_context


class Charge(BaseModel):
    order_id: str
    amount_cents: int


registry = Registry()


@registry.job("shop.charge", Charge, max_attempts=5, priority=7)
async def charge(context: JobContext, payload: Charge) -> dict[str, Any]:
    """Charge the order's card."""
    return {"charged": payload.amount_cents, "attempt": context.attempt}


@registry.job("shop.receipt", Charge)
def receipt(context: JobContext, payload: Charge) -> dict[str, Any]:
    return {"receipt_for": payload.order_id}


class Refund(BaseModel):
    """A payload whose field is spelled another way in JSON, as many APIs' are."""

    order_id: str = Field(alias="orderId")


@registry.job("shop.refund", Refund)
def refund(context: JobContext, payload: Refund) -> dict[str, Any]:
    return {"refunded": payload.order_id}


@pytest.fixture(autouse=True)
def nothing_configured() -> Iterator[None]:
    """Each test starts without ``jobrelay.configure`` and leaves what was there."""
    previous = install_enqueuer(None)
    yield
    install_enqueuer(previous)


# --- still the handler ----------------------------------------------------------------------


async def test_the_definition_of_an_async_handler_is_called_as_the_handler() -> None:
    assert isinstance(charge, JobDefinition)
    result = await charge(make_context(charge, attempt=2), Charge(order_id="o-1", amount_cents=5))
    assert result == {"charged": 5, "attempt": 2}


def test_the_definition_of_a_plain_handler_is_called_as_the_handler() -> None:
    assert receipt(make_context(receipt), Charge(order_id="o-2", amount_cents=1)) == {
        "receipt_for": "o-2"
    }


def test_the_registry_keeps_the_raw_function_so_the_consumer_detects_sync_and_async_as_before() -> (
    None
):
    assert registry.get("shop.charge").handler is charge.handler
    assert inspect.iscoroutinefunction(registry.get("shop.charge").handler)
    assert not registry.get("shop.charge").runs_in_thread
    assert registry.get("shop.receipt").runs_in_thread
    assert is_async_handler(charge) and not is_async_handler(receipt)
    if sys.version_info >= (3, 12):  # markcoroutinefunction
        assert inspect.iscoroutinefunction(charge) and not inspect.iscoroutinefunction(receipt)


def test_the_definition_keeps_the_handlers_name_docstring_and_module() -> None:
    assert charge.__name__ == "charge"
    assert charge.__doc__ == "Charge the order's card."
    assert charge.__module__ == __name__
    assert charge.__wrapped__ is charge.handler
    assert registry.get("shop.charge").description == "Charge the order's card."
    assert (charge.name, charge.payload_model, charge.job_type.max_attempts) == (
        "shop.charge",
        Charge,
        5,
    )


def test_a_definition_pickles_and_copies_by_reference_as_a_function_does() -> None:
    assert pickle.loads(pickle.dumps(charge)) is charge
    assert copy.copy(charge) is charge and copy.deepcopy(charge) is charge  # not its registry

    class Handler:
        def __call__(self, context: JobContext, payload: Charge) -> dict[str, Any]:
            return {}

    nameless = Registry().job("a.nameless", Charge)(Handler())
    with pytest.raises(TypeError, match=r"'a\.nameless': its handler has no name to pickle by"):
        pickle.dumps(nameless)


def test_one_handler_registered_under_two_names_gives_two_definitions() -> None:
    twice = Registry()

    def handler(context: JobContext, payload: Charge) -> dict[str, Any]:
        return {}

    first = twice.job("a.first", Charge)(handler)
    second = twice.job("a.second", Charge, priority=3)(handler)
    assert (first.name, second.name) == ("a.first", "a.second")
    assert twice.get("a.first").handler is twice.get("a.second").handler is handler


# --- enqueue: checked before anything is sent -------------------------------------------------


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the changed model's dump
def test_an_invalid_payload_raises_the_registrys_invalid_payload_and_sends_nothing() -> None:
    recorder = Recorder()
    jobrelay.configure(client=recorder)
    with pytest.raises(InvalidPayload) as raised:
        charge.enqueue({"order_id": "o-1", "amount_cents": "five"})
    assert raised.value.code == "invalid_payload"
    assert raised.value.extra["errors"][0]["loc"] == ["amount_cents"]
    changed = Charge(order_id="o-1", amount_cents=5)
    changed.amount_cents = "five"  # type: ignore[assignment]  # no validate_assignment
    with pytest.raises(InvalidPayload):
        charge.enqueue(changed)
    with pytest.raises(InvalidPayload):
        charge.enqueue(["not", "an", "object"])  # type: ignore[arg-type]
    assert recorder.jobs == []


def test_a_model_with_aliases_is_sent_as_the_json_its_model_validates() -> None:
    recorder = Recorder()
    jobrelay.configure(client=recorder)
    job = refund.enqueue(Refund(orderId="o-1"))
    assert job.payload == {"orderId": "o-1"}
    assert refund.request(Refund(orderId="o-1")).payload == {"orderId": "o-1"}
    scheduling = Registry()
    scheduling.job("shop.refund", Refund)(refund.handler)
    nightly = scheduling.schedule(
        "nightly", type="shop.refund", payload=Refund(orderId="o-2"), every=60
    )
    assert nightly.payload == {"orderId": "o-2"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key": ""}, "key must be 1 to 200 visible ASCII characters"),
        ({"key": "a key"}, "key must be 1 to 200 visible ASCII characters"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at must be a datetime with a time zone"),
        ({"priority": 101}, "priority must be from -100 to 100"),
    ],
)
def test_a_key_due_time_or_priority_no_submission_can_have_is_a_value_error(
    options: dict[str, Any], message: str
) -> None:
    recorder = Recorder()
    jobrelay.configure(client=recorder)
    with pytest.raises(ValueError, match=message):
        charge.enqueue(Charge(order_id="o-1", amount_cents=5), **options)
    assert recorder.jobs == []


# --- enqueue: what it goes through ----------------------------------------------------------


def test_without_configure_an_enqueue_says_which_configure_call_is_missing() -> None:
    payload = Charge(order_id="o-1", amount_cents=5)
    with pytest.raises(NotConfigured, match=r"jobrelay\.configure\(client=jobrelay\.Client"):
        charge.enqueue(payload)
    with pytest.raises(NotConfigured, match=r"jobrelay\.configure\(client_name="):
        charge.enqueue(payload, connection=object())


async def test_without_configure_an_async_enqueue_names_the_async_client() -> None:
    with pytest.raises(NotConfigured, match=r"configure\(async_client=jobrelay\.AsyncClient"):
        await charge.enqueue_async(Charge(order_id="o-1", amount_cents=5))


def test_an_enqueue_goes_through_the_configured_client_with_a_fresh_key_each_time() -> None:
    recorder = Recorder()
    jobrelay.configure(client=recorder)
    first = charge.enqueue(Charge(order_id="o-1", amount_cents=5))
    second = charge.enqueue(Charge(order_id="o-1", amount_cents=5))
    assert first.id != second.id and first.idempotency_key != second.idempotency_key
    assert uuid.UUID(first.idempotency_key)  # uuid4-based
    assert [job.payload for job in recorder.jobs] == [{"order_id": "o-1", "amount_cents": 5}] * 2


def test_the_same_key_and_request_answer_the_same_job_as_a_retry_safe_caller_wants() -> None:
    recorder = Recorder()
    jobrelay.configure(client=recorder)
    due = datetime(2030, 1, 1, tzinfo=UTC)
    made = charge.enqueue(Charge(order_id="o-1", amount_cents=5), key="charge:o-1", run_at=due)
    again = charge.enqueue({"order_id": "o-1", "amount_cents": 5}, key="charge:o-1", run_at=due)
    assert again.id == made.id and len(recorder.jobs) == 1
    assert (made.idempotency_key, made.run_at) == ("charge:o-1", due)


async def test_an_async_enqueue_goes_through_the_configured_async_client() -> None:
    recorder = Recorder()
    jobrelay.configure(async_client=recorder.async_client)
    job = await charge.enqueue_async({"order_id": "o-1", "amount_cents": 5}, priority=-2)
    assert recorder.jobs == [job] and job.priority == -2
    with pytest.raises(NotConfigured, match=r"configure\(client="):
        charge.enqueue({"order_id": "o-1", "amount_cents": 5})  # only an async client


def test_with_a_connection_it_is_jobrelay_enqueue_for_the_configured_client_name() -> None:
    jobrelay.configure(client_name="shop")
    # A connection of no kind jobrelay.enqueue takes: its own TypeError says it was reached.
    with pytest.raises(TypeError, match="enqueue needs a psycopg Connection"):
        charge.enqueue(Charge(order_id="o-1", amount_cents=5), connection=object())


def test_configure_refuses_a_client_of_the_wrong_kind_and_clears_with_no_argument() -> None:
    recorder = Recorder()
    with pytest.raises(TypeError, match="is async: pass it as async_client="):
        jobrelay.configure(client=recorder.async_client)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="is not async: pass it as client="):
        jobrelay.configure(async_client=recorder)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must have a submit method"):
        jobrelay.configure(client="http://localhost:8000")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="client_name is a jobrelay client's name or id"):
        jobrelay.configure(client_name=7)  # type: ignore[arg-type]
    jobrelay.configure(client=recorder)
    jobrelay.configure()
    with pytest.raises(NotConfigured):
        charge.enqueue(Charge(order_id="o-1", amount_cents=5))


def test_the_request_carries_the_types_registry_so_its_defaults_apply() -> None:
    recorder = Recorder()
    jobrelay.configure(client_name="shop")
    with recorder.install():
        job = charge.enqueue(Charge(order_id="o-1", amount_cents=5), connection=object())
    assert (job.priority, job.max_attempts, job.in_transaction) == (7, 5, True)
    request = charge.request(Charge(order_id="o-1", amount_cents=5), key="k")
    assert request.registry is registry and request.type == "shop.charge"


def test_import_jobrelay_and_configure_load_neither_httpx_nor_a_database_driver() -> None:
    code = textwrap.dedent(
        """
        import sys, jobrelay
        jobrelay.configure(client_name="shop")
        print(sorted({"httpx", "psycopg", "sqlalchemy"} & set(sys.modules)))
        """
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"


def test_mypy_sees_the_payload_model_in_enqueue_and_the_handlers_signature(tmp_path: Path) -> None:
    from mypy import api

    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from typing import Any
            from pydantic import BaseModel
            from jobrelay import JobContext, Registry

            registry = Registry()

            class Charge(BaseModel):
                order_id: str

            class Refund(BaseModel):
                order_id: str

            @registry.job("shop.charge", Charge)
            async def charge(context: JobContext, payload: Charge) -> dict[str, Any]:
                return {}

            charge.enqueue(Charge(order_id="o"))
            charge.enqueue({"order_id": "o"})
            charge.enqueue(Refund(order_id="o"))
            async def call() -> None:
                reveal_type(await charge(None, Charge(order_id="o")))
            """
        )
    )
    out, _, _ = api.run(["--strict", "--config-file=", "--no-incremental", str(snippet)])
    lines = {line.split(": ", 1)[1] for line in out.splitlines() if "snippet.py:" in line}
    assert lines == {
        'error: Argument 1 to "enqueue" of "JobDefinition" has incompatible type "Refund"; '
        'expected "Charge | dict[str, Any]"  [arg-type]',
        'error: Argument 1 to "__call__" of "JobDefinition" has incompatible type "None"; '
        'expected "JobContext"  [arg-type]',
        'note: Revealed type is "dict[str, Any]"',
    }, out
