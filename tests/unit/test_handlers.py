"""Handler registries and what a failure leaves behind, without servers: loading and combining
registries, plain and async handlers, failure descriptions, masking, log lines, the trace."""

from __future__ import annotations

import json
import logging
import random
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from jobrelay.cli.output import render_trace
from jobrelay.core.errors import ConfigurationError, PermanentError
from jobrelay.core.failures import describe_failure, public_failure
from jobrelay.core.jobs import Job, JournalEntry
from jobrelay.core.masking import Masker
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.core.trace import JobTrace, trace_document
from jobrelay.handlers import builtin
from jobrelay.handlers.loading import load_registry, registry_for, require_job_types
from jobrelay.logs import JsonFormatter

BUILTIN_TYPES = {"catalog.export", "demo.sleep", "demo.fail"}


class Empty(BaseModel):
    pass


# --- registries on the command line ----------------------------------------------------------


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An application folder as the current directory, which is not on sys.path yet (as for
    the installed `jobrelay` script); modules written there are forgotten afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write_registry(folder: Path, package: str, *types: str) -> str:
    """``package/jobs.py`` defining ``types`` in ``registry``; returns ``package.jobs:registry``."""
    (folder / package).mkdir()
    (folder / package / "__init__.py").write_text("")
    lines = [
        "from pydantic import BaseModel",
        "from jobrelay import Registry",
        "registry = Registry()",
        "class P(BaseModel):",
        "    pass",
    ]
    for number, name in enumerate(types):
        lines += [
            f"@registry.job({name!r}, P)",
            f"async def handler_{number}(context, payload):",
            "    return {}",
        ]
    (folder / package / "jobs.py").write_text("\n".join(lines) + "\n")
    return f"{package}.jobs:registry"


def test_the_builtin_demo_types_are_loaded_only_when_asked_for(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_registry(app_dir, f"shop_{uuid.uuid4().hex[:6]}", "shop.receipt")
    assert {t.name for t in load_registry(spec)} == {"shop.receipt"}
    assert {t.name for t in load_registry(spec, builtins=True)} == {*BUILTIN_TYPES, "shop.receipt"}
    monkeypatch.delenv("JOBRELAY_BUILTINS", raising=False)
    assert Settings().builtins is False  # production default: no client can run the demo types
    assert {t.name for t in registry_for(Settings(), spec)} == {"shop.receipt"}
    monkeypatch.setenv("JOBRELAY_BUILTINS", "true")
    assert {t.name for t in registry_for(Settings(), spec)} == {*BUILTIN_TYPES, "shop.receipt"}


def test_several_registries_are_combined_and_the_current_directory_is_importable(
    app_dir: Path,
) -> None:
    shop = write_registry(app_dir, f"shop_{uuid.uuid4().hex[:6]}", "shop.receipt")
    mail = write_registry(app_dir, f"mail_{uuid.uuid4().hex[:6]}", "mail.send", "mail.bounce")
    combined = load_registry(f" {shop} , {mail},", builtins=True)
    assert {t.name for t in combined} == {
        *BUILTIN_TYPES,
        "shop.receipt",
        "mail.send",
        "mail.bounce",
    }


def test_a_type_defined_twice_is_an_error_naming_both_modules(app_dir: Path) -> None:
    first = write_registry(app_dir, f"first_{uuid.uuid4().hex[:6]}", "shop.receipt")
    second = write_registry(app_dir, f"second_{uuid.uuid4().hex[:6]}", "shop.receipt")
    with pytest.raises(ConfigurationError) as error:
        load_registry(f"{first},{second}")
    assert "'shop.receipt' is defined twice" in str(error.value)
    assert first in str(error.value) and second in str(error.value)
    # A built-in type redefined by an application is a duplicate too.
    clash = write_registry(app_dir, f"clash_{uuid.uuid4().hex[:6]}", "demo.sleep")
    with pytest.raises(ConfigurationError, match=r"jobrelay\.handlers\.builtin:registry"):
        load_registry(clash, builtins=True)


def test_a_registry_that_includes_the_builtin_definitions_is_not_a_duplicate() -> None:
    # tests.support.consumer_kit:registry registers the built-in JobType objects themselves.
    loaded = load_registry("tests.support.consumer_kit:registry")
    assert {t.name for t in loaded} >= BUILTIN_TYPES and "test.count" in loaded
    assert {t.name for t in load_registry("jobrelay.handlers.builtin:registry")} == BUILTIN_TYPES


def test_registries_that_do_not_load_are_one_clear_error(app_dir: Path) -> None:
    for spec, words in (
        ("no_such_module_here:registry", "cannot import handlers module"),
        ("jobrelay.handlers", "module:registry"),
        ("jobrelay.handlers.builtin:nothing", "is not a jobrelay Registry"),
    ):
        with pytest.raises(ConfigurationError, match=words):
            load_registry(spec)
    # No types at all is an API that accepts what the consumers registered; a consumer refuses.
    assert list(load_registry("")) == []
    with pytest.raises(ConfigurationError, match="JOBRELAY_HANDLERS=module:registry"):
        require_job_types(load_registry(""))


def test_a_consumer_with_no_job_types_stops_at_start_with_one_line_naming_the_setting() -> None:
    # No JOBRELAY_* at all: the production defaults, no handlers, no demo types. It stops
    # before it connects to anything (the default URLs point at no server here).
    from tests.support.processes import jobrelay_env, run_cli

    result = run_cli(jobrelay_env({}), "consumer", timeout=60)

    assert result.returncode == 2
    (line,) = (result.stdout + result.stderr).strip().splitlines()
    message = json.loads(line)["msg"]
    assert "no job types to run" in message and "JOBRELAY_HANDLERS" in message, message
    assert "JOBRELAY_BUILTINS=true" in message


def test_the_handlers_option_overrides_the_setting_and_builtins_can_be_left_out(
    app_dir: Path,
) -> None:
    shop = write_registry(app_dir, f"shop_{uuid.uuid4().hex[:6]}", "shop.receipt")
    settings = Settings(handlers="no_such_module:registry", builtins=False)
    assert {t.name for t in registry_for(settings, shop)} == {"shop.receipt"}
    with pytest.raises(ConfigurationError):
        registry_for(settings)


def test_settings_read_handlers_builtins_and_the_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRELAY_HANDLERS", "shop.jobs:registry")
    monkeypatch.setenv("JOBRELAY_BUILTINS", "false")
    monkeypatch.setenv("JOBRELAY_UNKNOWN_TYPE_PATIENCE_SECONDS", "60")
    settings = Settings()
    assert (settings.handlers, settings.builtins) == ("shop.jobs:registry", False)
    assert settings.unknown_type_patience_seconds == 60
    assert Settings.model_fields["unknown_type_patience_seconds"].default == 3600


# --- plain and async handlers ------------------------------------------------------------------


def test_a_plain_def_handler_is_registered_to_run_in_a_thread() -> None:
    registry = Registry()

    @registry.job("x.plain", Empty)
    def plain(context: JobContext, payload: Empty) -> dict[str, Any]:
        return {}

    @registry.job("x.async", Empty)
    async def asynchronous(context: JobContext, payload: Empty) -> dict[str, Any]:
        return {}

    class Callable:
        async def __call__(self, context: JobContext, payload: Empty) -> dict[str, Any]:
            return {}

    registry.job("x.callable", Empty)(Callable())
    assert registry.get("x.plain").runs_in_thread
    assert not registry.get("x.async").runs_in_thread
    assert not registry.get("x.callable").runs_in_thread
    assert plain(None, Empty()) == {}  # type: ignore[arg-type]  # the decorator returns it as is
    with pytest.raises(TypeError):
        registry.job("x.nothing", Empty)("not a function")  # type: ignore[type-var]


def test_a_deferral_waits_between_a_second_and_a_minute() -> None:
    rng = random.Random(5)
    assert all(0.5 <= RetryPolicy(1, 0).unknown_type_delay(rng) <= 1 for _ in range(100))
    assert all(2.5 <= RetryPolicy(1, 5).unknown_type_delay(rng) <= 5 for _ in range(100))
    assert all(30 <= RetryPolicy(1, 300).unknown_type_delay(rng) <= 60 for _ in range(100))


# --- failures and masking -------------------------------------------------------------------


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_a_failure_is_described_by_its_class_message_and_traceback_cut_to_size() -> None:
    failure = describe_failure(raised(RuntimeError("the upstream said no")))
    assert failure.error_class == "RuntimeError"
    assert failure.message == "the upstream said no"
    assert failure.traceback is not None and "in raised" in failure.traceback
    assert failure.traceback.rstrip().endswith("RuntimeError: the upstream said no")

    huge = describe_failure(raised(ValueError("é" * 10_000 + "\n" + "x" * 40_000)))
    assert len(huge.message.encode()) <= 2048 and huge.message.startswith("éé")
    assert huge.traceback is not None and len(huge.traceback.encode()) <= 16 * 1024
    assert huge.traceback.rstrip().endswith("x" * 100)  # the end is kept

    odd = describe_failure(raised(PermanentError("nul\x00 and \ud800", code="odd")))
    assert odd.error_class == "jobrelay.core.errors.PermanentError"
    assert "\x00" not in odd.message and "\ud800" not in odd.message
    json.dumps(odd.as_json()).encode()  # storable as jsonb
    assert describe_failure(ValueError("never raised")).traceback is None


def test_an_exception_whose_message_cannot_be_read_is_still_described() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert "could not be read" in describe_failure(raised(Broken())).message


def test_known_secrets_tokens_and_url_passwords_are_masked() -> None:
    masker = Masker.for_urls(
        [
            "postgresql+psycopg://app:pg%2Fs3cret!@db:5432/app",
            "amqp://app:mq-secret@h1:5672/,amqp://app:mq-other@h2:5672/",
        ]
    )
    text = (
        "login pg/s3cret! failed; mq-secret and mq-other refused; Bearer jr_AbC123dEf456_-x; "
        "see amqp://u:whatever@h/; password=hunter2 token: abc"
    )
    masked = masker(text)
    for secret in ("pg/s3cret!", "mq-secret", "mq-other", "jr_AbC123dEf456_-x", "whatever"):
        assert secret not in masked
    assert "hunter2" not in masked and "abc" not in masked
    assert "Bearer jr_***" in masked and "amqp://u:***@h/" in masked


def test_the_public_default_passwords_are_not_masked_out_of_every_path() -> None:
    masker = Masker.from_settings(Settings())  # jobrelay / guest: the documented defaults
    assert masker("services/jobrelay/consumer/worker.py as guest") == (
        "services/jobrelay/consumer/worker.py as guest"
    )
    assert masker("postgresql://jobrelay:jobrelay@db/x") == "postgresql://jobrelay:***@db/x"


def test_a_log_line_keeps_the_traceback_with_secrets_masked() -> None:
    formatter = JsonFormatter("consumer", Masker.for_urls(["postgresql://u:SENTINEL-pw@h/d"]))
    error = raised(RuntimeError("cannot connect with SENTINEL-pw"))
    record = logging.LogRecord(
        "jobrelay.handler", logging.ERROR, __file__, 1, "failed: %s", ("SENTINEL-pw",), None
    )
    record.exc_info = (type(error), error, error.__traceback__)
    record.job_id = "j-1"
    line = json.loads(formatter.format(record))
    assert line["msg"] == "failed: ***" and line["job_id"] == "j-1"
    assert line["error"] == "RuntimeError"
    assert "in raised" in line["traceback"] and "cannot connect with ***" in line["traceback"]
    assert "SENTINEL-pw" not in json.dumps(line)


# --- the trace -----------------------------------------------------------------------------------


def a_job(state: JobState = JobState.RETRYING) -> Job:
    now = datetime(2024, 5, 1, tzinfo=UTC)
    return Job(
        id=uuid.uuid4(),
        client_id=uuid.uuid4(),
        idempotency_key="k",
        type="shop.charge",
        payload={},
        state=state,
        attempts=1,
        max_attempts=3,
        available_at=now,
        created_at=now,
        updated_at=now,
        last_error_code="unexpected_error",
        last_error="RuntimeError: no",
    )


def test_the_trace_shows_failures_with_tracebacks_to_operators_and_without_to_owners() -> None:
    at = datetime(2024, 5, 1, tzinfo=UTC)
    error = describe_failure(raised(RuntimeError("no"))).as_json()
    events = [
        JournalEntry(at, "received", 0, None),
        JournalEntry(at, "deferred", 0, "unknown_job_type: not known to consumer c1"),
        JournalEntry(at, "claimed", 1, None),
        JournalEntry(at, "retry_scheduled", 1, "unexpected_error: retry at …", error),
    ]
    trace = JobTrace(a_job(), "alice", outbox=[], events=events, result=None)
    full = trace_document(trace)
    assert full["deliveries"] == {"total": 2, "claimed": 1, "duplicate": 0, "deferred": 1}
    assert full["last_failure"]["error"]["traceback"] == error["traceback"]
    assert full["events"][3]["error"] == error
    shown = render_trace(full)
    assert "RuntimeError: no" in shown and "Traceback (most recent call last)" in shown

    owner = trace_document(trace, tracebacks=False)
    assert owner["last_failure"]["error"] == {"class": "RuntimeError", "message": "no"}
    assert "Traceback" not in json.dumps(owner)
    assert public_failure(None) is None

    deferred = trace_document(
        JobTrace(a_job(JobState.QUEUED), "a", outbox=[], events=events[:2], result=None)
    )
    assert deferred["why"].startswith("not stopped: deferred")


def test_the_builtin_registry_is_untouched_by_loading() -> None:
    load_registry("tests.support.consumer_kit:registry")
    assert {t.name for t in builtin.registry} == BUILTIN_TYPES
