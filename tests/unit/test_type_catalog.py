"""The catalog of job types without servers (core/type_catalog.py): what a consumer registers,
how a registered type's payload is checked and defaulted, loaded handlers first, and when the
API's cache reads the store again (the in-memory ``TypeStore``)."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from jobrelay.consumer.service import register_types
from jobrelay.core.errors import InvalidPayload, StoreUnavailable, UnknownJobType
from jobrelay.core.flow import Limit, Rate, Throttle
from jobrelay.core.jobs import Flow
from jobrelay.core.registry import JobType, Registry
from jobrelay.core.type_catalog import (
    MISS_RELOAD_SECONDS,
    REFRESH_SECONDS,
    RegisteredType,
    RegisteredTypes,
    SchemaValidators,
    TypeCatalog,
    registrable_types,
)
from tests.support.type_store_fakes import InMemoryTypeStore


class Address(BaseModel):
    city: str


class Signup(BaseModel):
    email: str
    seats: int = Field(ge=1, le=10)
    address: Address
    tags: list[str] = []


class Other(BaseModel):
    x: int


def signup_type(**options: Any) -> JobType:
    return JobType("shop.signup", Signup, max_attempts=7, priority=5, **options)


def registered(name: str = "shop.signup", **changes: Any) -> RegisteredType:
    """``shop.signup`` as a consumer registers it, under ``name``, with ``changes``."""
    return replace(RegisteredType.of(signup_type(), by="host:1"), name=name, **changes)


def catalog_of(*types: RegisteredType, loaded: Registry | None = None) -> TypeCatalog:
    return TypeCatalog(loaded or Registry(), {t.name: t for t in types})


def errors_of(error: InvalidPayload) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = error.extra["errors"]  # type: ignore[assignment]
    return errors


VALID = {"email": "a@example.com", "seats": 2, "address": {"city": "Lyon"}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- what a consumer registers ------------------------------------------------------------------


def test_a_registered_type_carries_the_models_schema_and_the_defaults_of_the_code() -> None:
    limit = Limit(concurrency=2, rate=Rate(5, 1), per_key=True)
    job_type = signup_type(timeout_seconds=12.5, description="Sign up", limit=limit)

    kept = RegisteredType.of(job_type, by="host:42")

    assert kept.payload_schema == Signup.model_json_schema()
    assert (kept.max_attempts, kept.priority, kept.timeout_seconds) == (7, 5, 12.5)
    assert (kept.limit, kept.description, kept.registered_by) == (limit, "Sign up", "host:42")


def test_a_type_whose_model_has_no_json_schema_is_left_out_of_the_registration() -> None:
    class Opaque(BaseModel):
        callback: Callable[[], None]  # a function has no JSON Schema

    registry = Registry()
    registry.register(JobType("opaque", Opaque))
    registry.register(signup_type())

    assert [t.name for t in registrable_types(registry, by="h")] == ["shop.signup"]


def test_a_type_whose_schema_the_database_cannot_store_is_left_out_of_the_registration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unbounded(BaseModel):
        ceiling: float = math.inf  # the schema's default: Infinity, which JSON has no form for

    class Nul(BaseModel):
        separator: str = "\x00"

    registry = Registry()
    registry.register(JobType("unbounded", Unbounded))
    registry.register(JobType("nul", Nul))
    registry.register(signup_type())

    assert [t.name for t in registrable_types(registry, by="h")] == ["shop.signup"]
    said = [r.getMessage() for r in caplog.records]
    assert (
        "job type nul not registered: its payload model's JSON Schema is not storable: "
        "a string contains a NUL character" in said
    )


async def test_a_consumer_registers_every_type_of_its_registry_and_the_last_writer_wins() -> None:
    store = InMemoryTypeStore()
    old, new = Registry(), Registry()
    old.register(JobType("shop.signup", Other))
    old.register(JobType("shop.other", Other))
    new.register(signup_type())

    assert await register_types(store, old, "old:1") == 2
    assert await register_types(store, new, "new:2") == 1

    assert sorted(store.types) == ["shop.other", "shop.signup"]  # nothing deleted
    assert store.types["shop.signup"].payload_schema == Signup.model_json_schema()
    assert store.types["shop.signup"].registered_by == "new:2"
    assert store.types["shop.other"].registered_by == "old:1"


# --- validating against a registered schema -----------------------------------------------------


def test_a_valid_payload_of_a_registered_type_is_accepted_as_it_is() -> None:
    assert catalog_of(registered()).validate_payload("shop.signup", VALID) == VALID


def test_a_bad_payload_is_invalid_payload_with_pydantic_shaped_errors_at_their_locations() -> None:
    bad = {"email": 3, "seats": 0, "address": {"city": ["secret-value"]}, "tags": [1]}

    with pytest.raises(InvalidPayload) as raised:
        catalog_of(registered()).validate_payload("shop.signup", bad)

    errors = errors_of(raised.value)
    assert {(tuple(e["loc"]), e["type"]) for e in errors} == {
        (("email",), "type"),
        (("seats",), "minimum"),
        (("address", "city"), "type"),
        (("tags", "0"), "type"),
    }
    assert all(set(e) == {"loc", "msg", "type"} for e in errors)


def test_the_errors_never_quote_the_payloads_values() -> None:
    bad = {"email": "hunter2-secret", "seats": 999_999, "address": {"city": 31337}, "extra": 1}
    schema = Signup.model_json_schema()
    strict = {
        **schema,
        "properties": {**schema["properties"], "email": {"type": "string", "maxLength": 3}},
        "additionalProperties": False,
    }

    with pytest.raises(InvalidPayload) as raised:
        catalog_of(registered(payload_schema=strict)).validate_payload("shop.signup", bad)

    said = repr(raised.value.extra) + str(raised.value)
    for value in ("hunter2", "999999", "31337"):
        assert value not in said
    assert ["extra"] in [e["loc"] for e in errors_of(raised.value)]


def test_a_missing_field_is_named_in_its_location_as_pydantic_does() -> None:
    with pytest.raises(InvalidPayload) as raised:
        catalog_of(registered()).validate_payload("shop.signup", {"email": "a@b"})

    assert {tuple(e["loc"]): e["type"] for e in errors_of(raised.value)} == {
        ("seats",): "missing",
        ("address",): "missing",
    }


class Booking(BaseModel):
    order_id: uuid.UUID = Field(alias="orderId")
    at: datetime


@pytest.mark.parametrize(
    "payload",
    [
        {"orderId": "12345678-1234-5678-1234-567812345678", "at": "2026-12-03T08:00:00Z"},
        # What the model takes and a checked format would not: a UUID without its hyphens, a
        # time without an offset.
        {"orderId": "12345678123456781234567812345678", "at": "2026-12-03T08:00:00"},
    ],
)
def test_the_api_refuses_no_uuid_or_time_text_the_consumers_model_takes(
    payload: dict[str, Any],
) -> None:
    Booking.model_validate(payload)  # what the consumer runs the job with
    types = catalog_of(RegisteredType.of(JobType("shop.book", Booking), by="host:1"))

    assert types.validate_payload("shop.book", payload) == payload


def test_a_registered_schema_names_the_fields_by_the_aliases_the_payload_uses() -> None:
    types = catalog_of(RegisteredType.of(JobType("shop.book", Booking), by="host:1"))
    by_field_name = {"order_id": "12345678-1234-5678-1234-567812345678", "at": "2026-12-03"}

    with pytest.raises(InvalidPayload) as raised:
        types.validate_payload("shop.book", by_field_name)

    assert [e["loc"] for e in errors_of(raised.value)] == [["orderId"]]
    with pytest.raises(ValidationError):
        Booking.model_validate(by_field_name)  # the consumer refuses it too


def test_a_type_neither_loaded_nor_registered_is_unknown() -> None:
    catalog = catalog_of(registered())

    assert "shop.refund" not in catalog
    for ask in (
        lambda: catalog.validate_payload("shop.refund", {}),
        lambda: catalog.max_attempts_for("shop.refund", 3),
        lambda: catalog.flow_defaults("shop.refund", {}, Flow()),
    ):
        with pytest.raises(UnknownJobType):
            ask()


def test_a_registered_type_gives_its_max_attempts_and_priority_but_no_keys() -> None:
    catalog = catalog_of(registered(), registered("shop.plain", max_attempts=None, priority=0))

    assert catalog.max_attempts_for("shop.signup", 3) == 7
    assert catalog.max_attempts_for("shop.plain", 3) == 3
    assert catalog.flow_defaults("shop.signup", VALID, Flow()) == Flow(priority=5)
    assert catalog.flow_defaults("shop.plain", VALID, Flow()) == Flow()


def test_loaded_handlers_win_over_a_registered_schema() -> None:
    loaded = Registry()
    loaded.register(JobType("shop.signup", Other, max_attempts=2, concurrency_key=str))

    catalog = catalog_of(registered(), loaded=loaded)

    assert catalog.validate_payload("shop.signup", {"x": "4"}) == Other(x=4)  # pydantic's
    with pytest.raises(InvalidPayload):
        catalog.validate_payload("shop.signup", VALID)
    assert catalog.max_attempts_for("shop.signup", 3) == 2
    assert catalog.flow_defaults("shop.signup", Other(x=4), Flow()).concurrency_key == "x=4"


def test_a_schema_is_compiled_once_however_many_types_and_lookups_share_it() -> None:
    validators = SchemaValidators()
    catalog = TypeCatalog(Registry(), {"a": registered("a"), "b": registered("b")}, validators)

    for _ in range(3):
        catalog.validate_payload("a", VALID)
        catalog.validate_payload("b", VALID)

    assert len(validators) == 1


# --- the API's cache ----------------------------------------------------------------------------


async def test_the_first_lookup_reads_the_store_and_later_ones_do_not() -> None:
    store = InMemoryTypeStore({"shop.signup": registered()})
    types = RegisteredTypes(store, Registry())

    for _ in range(5):
        catalog = await types.catalog_for(["shop.signup"])

    assert "shop.signup" in catalog
    assert store.reads == 1


async def test_a_type_of_the_loaded_registry_reads_the_store_once_then_only_when_told() -> None:
    # Once: the runtime throttles (type_limits) hold for a loaded type too.
    loaded = Registry()
    loaded.register(JobType("shop.signup", Signup))
    store = InMemoryTypeStore()
    types = RegisteredTypes(store, loaded)

    await types.catalog_for(["shop.signup"])
    await types.catalog_for(["shop.signup"])
    assert store.reads == 1

    store.throttles["shop.signup"] = Throttle(3, 60)
    types.invalidate()  # the NOTIFY of set_type_limit
    catalog = await types.catalog_for(["shop.signup"])

    assert store.reads == 2
    assert catalog.throttle_for("shop.signup") == Throttle(3, 60)


def test_a_runtime_throttle_wins_over_the_codes_and_the_registered_one() -> None:
    loaded = Registry()
    loaded.register(JobType("shop.signup", Signup, throttle=Throttle(10, 1)))
    elsewhere = registered(name="shop.refund", throttle=Throttle(5, 3600))
    catalog = TypeCatalog(loaded, {"shop.refund": elsewhere})
    assert catalog.throttle_for("shop.signup") == Throttle(10, 1)
    assert catalog.throttle_for("shop.refund") == Throttle(5, 3600)

    runtime = {"shop.signup": Throttle(1, 60), "shop.refund": Throttle(2, 60)}
    catalog = TypeCatalog(loaded, {"shop.refund": elsewhere}, runtime_throttles=runtime)

    assert catalog.throttle_for("shop.signup") == Throttle(1, 60)
    assert catalog.throttle_for("shop.refund") == Throttle(2, 60)
    assert catalog.throttle_for("shop.unknown") is None


async def test_a_miss_reads_the_store_at_most_once_per_interval() -> None:
    clock = Clock()
    store = InMemoryTypeStore()
    types = RegisteredTypes(store, Registry(), miss_reload_seconds=1.0, clock=clock)

    for _ in range(10):
        assert "shop.signup" not in await types.catalog_for(["shop.signup"])
    assert store.reads == 1

    await store.register_types([registered()])
    clock.now = 0.5
    assert "shop.signup" not in await types.catalog_for(["shop.signup"])
    clock.now = 1.0
    assert "shop.signup" in await types.catalog_for(["shop.signup"])
    assert store.reads == 2


async def test_a_notification_has_the_next_lookup_read_the_store_again() -> None:
    clock = Clock()
    store = InMemoryTypeStore({"shop.signup": registered()})
    types = RegisteredTypes(store, Registry(), clock=clock)
    await types.catalog_for(["shop.signup"])

    changed = {**Signup.model_json_schema(), "required": ["email"]}
    await store.register_types([registered(payload_schema=changed)])
    types.invalidate()
    catalog = await types.catalog_for(["shop.signup"])

    assert catalog.validate_payload("shop.signup", {"email": "a@b"}) == {"email": "a@b"}
    assert store.reads == 2


async def test_a_failed_read_leaves_the_catalog_to_be_read_at_the_next_lookup() -> None:
    class Flaky(InMemoryTypeStore):
        fail = True

        async def registered_types(self) -> list[RegisteredType]:
            if self.fail:
                raise StoreUnavailable("down")
            return await super().registered_types()

    store = Flaky({"shop.signup": registered()})
    types = RegisteredTypes(store, Registry())

    with pytest.raises(StoreUnavailable):
        await types.catalog_for(["shop.signup"])
    store.fail = False
    assert "shop.signup" in await types.catalog_for(["shop.signup"])


async def test_the_periodic_read_goes_on_after_any_failed_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[Exception] = [StoreUnavailable("down"), RuntimeError("row 'x' is odd")]

    class Failing(InMemoryTypeStore):
        async def registered_types(self) -> list[RegisteredType]:
            if failures:
                raise failures.pop(0)
            return await super().registered_types()

    types = RegisteredTypes(Failing({"shop.signup": registered()}), Registry(), refresh_seconds=0)
    periodic = asyncio.create_task(types.keep_fresh())
    try:
        for _ in range(100):
            await asyncio.sleep(0)
            if "shop.signup" in types.catalog:  # read by keep_fresh alone: no lookup here
                break
    finally:
        periodic.cancel()

    assert "shop.signup" in types.catalog
    said = [
        r.getMessage()
        for r in caplog.records
        if getattr(r, "event", "") == "job_types_not_reloaded"
    ]
    assert said == [
        "registered job types not reloaded (down)",
        "registered job types not reloaded (RuntimeError)",
    ]


@pytest.mark.parametrize("name", ["shop.signup", "shop.unknown"])
async def test_concurrent_lookups_during_the_first_read_share_it(name: str) -> None:
    store = InMemoryTypeStore({"shop.signup": registered()})  # its read suspends
    types = RegisteredTypes(store, Registry())

    catalogs = await asyncio.gather(*(types.catalog_for([name]) for _ in range(20)))

    assert store.reads == 1
    assert {name in catalog for catalog in catalogs} == {name == "shop.signup"}


async def test_a_read_that_ends_after_a_later_one_does_not_bring_back_its_older_rows() -> None:
    class Gated(InMemoryTypeStore):
        """The first read takes its rows at once and answers when ``first_done`` is set."""

        first_done = asyncio.Event()

        async def registered_types(self) -> list[RegisteredType]:
            rows = await super().registered_types()
            if self.reads == 1:
                await self.first_done.wait()
            return rows

    store = Gated()
    types = RegisteredTypes(store, Registry())
    periodic = asyncio.create_task(types.reload())  # keep_fresh's, outside the lock
    await asyncio.sleep(0.01)  # it has its (empty) rows and waits
    await store.register_types([registered()])
    types.invalidate()  # the registration's NOTIFY

    assert "shop.signup" in await types.catalog_for(["shop.signup"])
    store.first_done.set()
    await periodic
    assert "shop.signup" in await types.catalog_for(["shop.signup"])
    assert store.reads == 2


async def test_the_fake_store_stamps_registrations_with_its_clock() -> None:
    at = datetime(2026, 12, 3, tzinfo=UTC)
    store = InMemoryTypeStore(clock=lambda: at)

    await store.register_types([registered()])

    assert store.types["shop.signup"].registered_at == at


@pytest.mark.parametrize("schema", [{"type": "nonsense"}, True, [], "text"])
async def test_a_registered_schema_that_does_not_compile_leaves_its_type_unknown(
    schema: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broken = registered("shop.broken", payload_schema=schema)  # a row written by hand
    store = InMemoryTypeStore({"shop.broken": broken, "shop.signup": registered()})
    types = RegisteredTypes(store, Registry())

    catalog = await types.catalog_for(["shop.broken"])

    assert "shop.broken" not in catalog and "shop.signup" in catalog
    assert [r.event for r in caplog.records if hasattr(r, "event")] == ["job_type_schema_invalid"]


def test_the_guide_states_the_catalogs_refresh_intervals_as_the_code_has_them() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "job-types.md").read_text()
    section = guide.split("## Registered types", 1)[1].split("\n## ", 1)[0]
    said = " ".join(section.split())

    assert (MISS_RELOAD_SECONDS, REFRESH_SECONDS) == (1.0, 30.0)
    assert "at most once a second" in said and "every 30 seconds" in said
