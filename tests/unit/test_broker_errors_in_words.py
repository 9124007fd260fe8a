"""A refused broker connection is said in words, and the broker libraries' own lines are debug
lines (issue 24, item 10): ``jobrelay.broker.connection.cause_of`` and ``jobrelay.logs``."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator

import aiormq.exceptions
import pytest

from jobrelay.broker.connection import cause_of, unavailable
from jobrelay.logs import configure_logging


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (aiormq.exceptions.AMQPConnectionError(111, "Connect call failed"), "connection refused"),
        (ConnectionRefusedError(111, "Connect call failed"), "connection refused"),
        (OSError(113, "Connect call failed"), "no route to host"),
        (
            aiormq.exceptions.AMQPConnectionError(-2, "Name or service not known"),
            "host not found (name or service not known)",
        ),
        (socket.gaierror(-3, "Temporary failure in name resolution"), "host not found"),
        (TimeoutError(), "no answer within 5s"),
        (
            aiormq.exceptions.ProbableAuthenticationError("ACCESS_REFUSED - Login was refused"),
            "login refused",
        ),
    ],
)
def test_a_failed_connection_attempt_is_said_in_words(error: Exception, words: str) -> None:
    assert words in cause_of(error, 5)


def test_an_unknown_error_keeps_its_text_with_any_password_masked() -> None:
    said = cause_of(RuntimeError("cannot use amqp://bob:hunter2-secret@host/ now"))
    assert said.startswith("RuntimeError: cannot use amqp://bob:")
    assert "hunter2-secret" not in said


def test_the_translated_error_names_the_masked_url_and_the_cause() -> None:
    error = unavailable("amqp://guest:hunter2-secret@127.0.0.1:1/", ConnectionRefusedError(111, ""))
    assert str(error) == "broker unavailable at amqp://guest:***@127.0.0.1:1/: connection refused"
    assert cause_of(error) == "connection refused"  # said once when wrapped again


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in ("aiormq", "aio_pika")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)


def _library_error() -> None:
    logging.getLogger("aiormq.connection").error("error when creating transport: %r", OSError())
    logging.getLogger("aio_pika.robust_connection").exception("reconnect failed", exc_info=True)
    logging.getLogger("jobrelay.test").warning("ours")


@pytest.mark.parametrize(
    ("level", "written"),
    [
        ("INFO", [("jobrelay.test", "warning")]),
        (
            "DEBUG",
            [
                ("aiormq.connection", "debug"),
                ("aio_pika.robust_connection", "debug"),
                ("jobrelay.test", "warning"),
            ],
        ),
    ],
)
def test_the_broker_libraries_lines_are_debug_lines_of_a_service_log(
    restored_logging: None,
    capsys: pytest.CaptureFixture[str],
    level: str,
    written: list[tuple[str, str]],
) -> None:
    configure_logging("dispatcher", level)
    _library_error()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(line["logger"], line["level"]) for line in lines] == written
