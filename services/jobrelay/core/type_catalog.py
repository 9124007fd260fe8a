"""Job types registered by the consumers, and the catalog the API validates submissions with.

A consumer registers every type of its registry at start (``RegisteredType.of``: the name, the
payload model's JSON Schema, the defaults, the code's limit) through a ``TypeStore``; an API
started without those handlers still validates their submissions (docs/job-types.md).

``TypeCatalog`` answers what ``Registry`` answers for a submission (``PayloadTypes``): the
loaded registry first, the registered types second. What is code cannot travel through the
database: a registered type has no ``concurrency_key=`` or ``unique=`` function, and its
payload is checked against the JSON Schema (jsonschema-rs), not by the pydantic model.

``RegisteredTypes`` keeps the catalog in memory (no database read per submission), with the
throttles set at runtime, and reloads it when told (``invalidate``: a NOTIFY of a registration
or of a runtime limit's change), on a miss at most once per ``miss_reload_seconds``, and every
``refresh_seconds`` (``keep_fresh``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import jsonschema_rs
from pydantic.errors import PydanticUserError

from jobrelay.core.errors import InvalidPayload, JobrelayError, UnknownJobType
from jobrelay.core.flow import Limit, Throttle
from jobrelay.core.jobs import Flow
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.registry import JobType, Registry

log = logging.getLogger("jobrelay.types")

# A miss (a type neither loaded nor in the catalog) reloads at most this often: a flood of
# submissions of an unknown type costs the database one read a second, not one each.
MISS_RELOAD_SECONDS = 1.0
# Reloaded this often anyway: what a lost notification (or none, behind PgBouncer without a
# listening connection: docs/pgbouncer.md) would have told.
REFRESH_SECONDS = 30.0
# At most this many errors of one payload are answered.
MAX_ERRORS = 50


@dataclass(frozen=True)
class RegisteredType:
    """A job type as a consumer registered it (a row of ``job_types``)."""

    name: str
    payload_schema: Mapping[str, Any]
    max_attempts: int | None = None  # None: the deployment's JOBRELAY_MAX_ATTEMPTS
    priority: int = 0
    timeout_seconds: float = 300.0
    limit: Limit | None = None  # the code's; for operators to read (the dispatcher has its own)
    description: str = ""
    registered_by: str = ""  # the consumer, as it names itself (host:pid)
    registered_at: datetime | None = None  # set by the database
    api: bool = True  # False: closed to HTTP by default (``JobType.api``)
    throttle: Throttle | None = None  # the code's (``JobType.throttle``)
    unique_for: float | None = None  # the window of a unique key (``JobType.unique_for``)

    @classmethod
    def of(cls, job_type: JobType, *, by: str) -> RegisteredType:
        """What a consumer registers of one of its types; its key functions stay behind."""
        return cls(
            name=job_type.name,
            payload_schema=job_type.payload_model.model_json_schema(),
            max_attempts=job_type.max_attempts,
            priority=job_type.priority,
            timeout_seconds=job_type.timeout_seconds,
            limit=job_type.limit,
            description=job_type.description,
            registered_by=by,
            api=job_type.api,
            throttle=job_type.throttle,
            unique_for=job_type.unique_for,
        )


def registrable_types(registry: Registry, *, by: str) -> list[RegisteredType]:
    """Every type of ``registry`` as registered, by name; a type whose model has no JSON
    Schema (a field pydantic cannot describe), or one the database cannot store (a default of
    ``math.inf``, a NUL character: all the types are one statement, which would fail the
    consumer's start), is left out with a warning: the API then knows it only if it loads the
    handlers."""
    registered = []
    for job_type in sorted(registry, key=lambda t: t.name):
        try:
            candidate = RegisteredType.of(job_type, by=by)
        except PydanticUserError as error:
            _not_registered(job_type.name, f"its payload model has no JSON Schema ({error.code})")
            continue
        why = unstorable_json(candidate.payload_schema)
        if why is not None:
            _not_registered(
                job_type.name, f"its payload model's JSON Schema is not storable: {why}"
            )
            continue
        registered.append(candidate)
    return registered


def _not_registered(name: str, why: str) -> None:
    log.warning(
        "job type %s not registered: %s",
        name,
        why,
        extra={"event": "job_type_not_registered", "type": name},
    )


class TypeStore(Protocol):
    """Where registered types are kept (``db/type_store.py::PgTypeStore``)."""

    async def register_types(self, types: Sequence[RegisteredType]) -> None:
        """Insert or replace each type (the last writer wins); never deletes one."""

    async def registered_types(self) -> list[RegisteredType]:
        """Every registered type."""

    async def runtime_throttles(self) -> dict[str, Throttle]:
        """The throttles set at runtime (``type_limits``), by type."""


class PayloadTypes(Protocol):
    """What a submission needs of its type: ``Registry`` and ``TypeCatalog`` both answer it."""

    def __contains__(self, name: object) -> bool: ...

    def validate_payload(self, name: str, payload: Any) -> Any: ...

    def max_attempts_for(self, name: str, default: int) -> int: ...

    def flow_defaults(self, name: str, payload: Any, asked: Flow) -> Flow: ...

    def throttle_for(self, name: str) -> Throttle | None: ...


# --- validating against a JSON Schema -------------------------------------------------------------


class SchemaValidators:
    """Compiled validators by schema: each schema is compiled once, and kept across reloads
    for as long as a type has it."""

    def __init__(self) -> None:
        self._compiled: dict[str, jsonschema_rs.Validator] = {}

    def for_schema(self, schema: Mapping[str, Any]) -> jsonschema_rs.Validator:
        text = json.dumps(schema, sort_keys=True)
        validator = self._compiled.get(text)
        if validator is None:
            validator = self._compiled[text] = jsonschema_rs.validator_for(dict(schema))
        return validator

    def keep_only(self, schemas: Iterable[Mapping[str, Any]]) -> None:
        """Forget the validators of schemas no type has any more."""
        kept = {json.dumps(schema, sort_keys=True) for schema in schemas}
        self._compiled = {text: v for text, v in self._compiled.items() if text in kept}

    def __len__(self) -> int:
        return len(self._compiled)


def schema_errors(validator: jsonschema_rs.Validator, payload: Any) -> list[dict[str, Any]]:
    """The payload's errors in the shape of pydantic's (``loc``, ``msg``, ``type``: the
    ``invalid_payload`` problem's), worded from the schema only: jsonschema-rs's own messages
    quote the offending value, which may be a secret."""
    if validator.is_valid(payload):  # the usual case, without building any error
        return []
    errors: list[dict[str, Any]] = []
    for error in validator.iter_errors(payload):
        errors.extend(_safe_errors(error))
        if len(errors) >= MAX_ERRORS:
            break
    return errors[:MAX_ERRORS]


def _safe_errors(error: jsonschema_rs.ValidationError) -> list[dict[str, Any]]:
    loc = [str(part) for part in error.instance_path]
    keyword = error.kind.name
    details = error.kind.as_dict()
    if keyword == "required":
        return [_error([*loc, str(details["property"])], "Field required", "missing")]
    if keyword == "additionalProperties":
        return [
            _error([*loc, str(name)], "Extra inputs are not permitted", "extra_forbidden")
            for name in details.get("unexpected", [])
        ]
    return [_error(loc, _message(keyword, details), keyword)]


def _error(loc: list[str], msg: str, kind: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": kind}


# What each keyword's failure says, from the schema's side of it (the limit, the pattern, the
# options): never the value given.
_SAID: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "type": lambda d: "Input should be of type " + " or ".join(map(str, d.get("types", []))),
    "minimum": lambda d: f"Input should be greater than or equal to {d.get('limit')}",
    "maximum": lambda d: f"Input should be less than or equal to {d.get('limit')}",
    "exclusiveMinimum": lambda d: f"Input should be greater than {d.get('limit')}",
    "exclusiveMaximum": lambda d: f"Input should be less than {d.get('limit')}",
    "multipleOf": lambda d: f"Input should be a multiple of {d.get('multiple_of')}",
    "minLength": lambda d: f"Input should have at least {d.get('limit')} characters",
    "maxLength": lambda d: f"Input should have at most {d.get('limit')} characters",
    "minItems": lambda d: f"Input should have at least {d.get('limit')} items",
    "maxItems": lambda d: f"Input should have at most {d.get('limit')} items",
    "pattern": lambda d: f"Input should match the pattern {d.get('pattern')!r}",
    "enum": lambda d: "Input should be one of " + ", ".join(map(repr, d.get("options", []))),
    "const": lambda d: f"Input should be {d.get('expected_value')!r}",
    "anyOf": lambda _: "Input matches none of the allowed schemas",
    "oneOf": lambda _: "Input should match exactly one of the allowed schemas",
}


def _message(keyword: str, details: Mapping[str, Any]) -> str:
    said = _SAID.get(keyword)
    return said(details) if said is not None else f"Input does not satisfy the schema's {keyword}"


# --- the catalog ----------------------------------------------------------------------------------


class TypeCatalog:
    """The types a submission may name: the loaded ``registry`` first (its pydantic models,
    its key functions), the ``registered`` types second (their JSON Schemas)."""

    def __init__(
        self,
        registry: Registry,
        registered: Mapping[str, RegisteredType] | None = None,
        validators: SchemaValidators | None = None,
        runtime_throttles: Mapping[str, Throttle] | None = None,
    ) -> None:
        self.registry = registry
        self.registered = dict(registered or {})
        # The throttles set at runtime (``type_limits``), by type: they win over the code's.
        self.runtime_throttles = dict(runtime_throttles or {})
        self.validators = validators if validators is not None else SchemaValidators()
        # By type name: a lookup on the hot path is one dict read, not a schema's text.
        self._by_name: dict[str, jsonschema_rs.Validator] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.registry or name in self.registered

    def names(self) -> list[str]:
        return sorted({*self.registry.types, *self.registered})

    def open_to_api(self, name: str) -> bool:
        """Whether a client without type patterns may submit type ``name`` over HTTP: not
        when its loaded handler or, without one, its registration says ``api=False`` (an
        unknown type is open: its submission is answered unknown_job_type)."""
        loaded = self.registry.types.get(name)
        if loaded is not None:
            return loaded.api
        registered = self.registered.get(name)
        return registered is None or registered.api

    def only_registered(self, name: str) -> RegisteredType | None:
        """Type ``name`` as registered when no loaded handler has it; else None."""
        return None if name in self.registry else self.registered.get(name)

    def _registered(self, name: str) -> RegisteredType:
        registered = self.registered.get(name)
        if registered is None:
            raise UnknownJobType(f"unknown job type {name[:100]!r}")
        return registered

    def validate_payload(self, name: str, payload: Any) -> Any:
        """The loaded model's value of ``payload``, or ``payload`` itself once it matches the
        registered schema; ``UnknownJobType``, ``InvalidPayload`` as ``Registry`` raises."""
        if name in self.registry:
            return self.registry.validate_payload(name, payload)
        validator = self._by_name.get(name)
        if validator is None:
            schema = self._registered(name).payload_schema
            validator = self._by_name[name] = self.validators.for_schema(schema)
        errors = schema_errors(validator, payload)
        if errors:
            raise InvalidPayload(f"payload does not match the schema of {name!r}", errors=errors)
        return payload

    def max_attempts_for(self, name: str, default: int) -> int:
        if name in self.registry:
            return self.registry.max_attempts_for(name, default)
        limit = self._registered(name).max_attempts
        return limit if limit is not None else default

    def flow_defaults(self, name: str, payload: Any, asked: Flow) -> Flow:
        """A registered type gives its priority only: its key functions are code, which did
        not travel (a submission gives its own keys)."""
        if name in self.registry:
            return self.registry.flow_defaults(name, payload, asked)
        registered = self._registered(name)
        return Flow(registered.priority or None, unique_for_seconds=registered.unique_for)

    def throttle_for(self, name: str) -> Throttle | None:
        """The throttle that holds for type ``name``: a runtime one (``runtime_throttles``)
        while set, else its code's; None: none."""
        runtime = self.runtime_throttles.get(name)
        if runtime is not None:
            return runtime
        if name in self.registry:
            return self.registry.throttle_for(name)
        registered = self.registered.get(name)
        return None if registered is None else registered.throttle


class RegisteredTypes:
    """The API's catalog, kept in memory and reloaded from a ``TypeStore``: never for a
    known type, on a miss at most once per ``miss_reload_seconds``, at the next lookup after
    ``invalidate`` (a notification; a loaded type's lookup too, for its runtime throttle), and
    every ``refresh_seconds`` in ``keep_fresh``."""

    def __init__(
        self,
        store: TypeStore,
        registry: Registry,
        *,
        miss_reload_seconds: float = MISS_RELOAD_SECONDS,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.miss_reload_seconds = miss_reload_seconds
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self._validators = SchemaValidators()
        self.catalog = TypeCatalog(registry, validators=self._validators)
        self._loaded_at: float | None = None  # never loaded yet
        self._stale = True
        self._lock = asyncio.Lock()
        # Reads are numbered as they start: keep_fresh and GET /v1/admin/types read outside
        # the lock, so an older read may end after a newer one and must not replace it.
        self._reads_started = 0
        self._read_applied = 0

    def invalidate(self) -> None:
        """A consumer registered types (or the notifications were interrupted): the next
        lookup reloads."""
        self._stale = True

    async def catalog_for(self, names: Iterable[str]) -> TypeCatalog:
        """The catalog, reloaded first when stale or when it lacks one of ``names`` and the
        last load is older than ``miss_reload_seconds``."""
        if self._needs_load(names):
            async with self._lock:  # one load for every lookup waiting on it
                if self._needs_load(names):
                    await self.reload()
        return self.catalog

    def _needs_load(self, names: Iterable[str]) -> bool:
        # Stale even for the loaded handlers' types: the runtime throttles (``type_limits``)
        # hold for them too, and a change of one notifies as a registration does.
        if self._stale or self._loaded_at is None:  # (None: the first read is under way)
            return True
        names = list(names)
        if all(name in self.catalog.registry for name in names):
            return False  # loaded handlers: what is registered does not matter
        if all(name in self.catalog for name in names):
            return False
        return self.clock() - self._loaded_at >= self.miss_reload_seconds

    async def reload(self) -> TypeCatalog:
        """Read every registered type; the catalog is replaced whole, unless a read that
        started later has replaced it already (this one's rows are then the older)."""
        self._stale = False  # a notification arriving during the read marks it again
        self._reads_started += 1
        read = self._reads_started
        try:
            registered = await self.store.registered_types()
            throttles = await self.store.runtime_throttles()
        except BaseException:
            self._stale = True
            raise
        if read < self._read_applied:
            return self.catalog
        self._read_applied = read
        self._loaded_at = self.clock()
        usable = [t for t in registered if self._compiles(t)]
        self._validators.keep_only(t.payload_schema for t in usable)
        self.catalog = TypeCatalog(
            self.catalog.registry, {t.name: t for t in usable}, self._validators, throttles
        )
        return self.catalog

    def _compiles(self, registered: RegisteredType) -> bool:
        """Compiled here, off the submissions' path; a schema that is no JSON Schema (a row
        written by hand) leaves its type unknown, with a warning, rather than failing each
        submission. So does one that is not a JSON object (``true``, a list), which a
        consumer never writes and ``for_schema`` cannot key."""
        try:
            if not isinstance(registered.payload_schema, Mapping):
                raise TypeError("a payload schema is a JSON object")
            self._validators.for_schema(registered.payload_schema)
        except (TypeError, ValueError, jsonschema_rs.ReferencingError) as error:
            log.warning(
                "registered job type %s ignored: its payload schema does not compile (%s)",
                registered.name,
                type(error).__name__,
                extra={"event": "job_type_schema_invalid", "type": registered.name},
            )
            return False
        return True

    async def keep_fresh(self) -> None:
        """Until cancelled: reload every ``refresh_seconds``; a failed reload is logged and
        tried again at the next turn (the catalog in memory still answers). Whatever the error:
        no one awaits this task before shutdown, so one it let out would end the refresh for
        good, unsaid. Only jobrelay's own errors are quoted (their URLs masked); of the others,
        a database's error may quote a row, so only the class is named."""
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.reload()
            except Exception as error:
                log.warning(
                    "registered job types not reloaded (%s)",
                    error if isinstance(error, JobrelayError) else type(error).__name__,
                    extra={"event": "job_types_not_reloaded"},
                )
