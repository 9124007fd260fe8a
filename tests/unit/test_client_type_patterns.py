"""Which client may submit what, as pure logic (core/clients.py): the patterns' checks, their
matching, the default rule; and the flag that closes a type to HTTP, from ``Registry.job`` to
the catalog the API checks with. tests/integration/test_client_types.py runs them end to end."""

from __future__ import annotations

import uuid

import pytest
from pydantic import BaseModel

from jobrelay.core.clients import (
    TYPE_PATTERNS_MAX,
    Client,
    check_type_patterns,
    matches_any,
    may_submit,
    parse_type_patterns,
)
from jobrelay.core.registry import Registry
from jobrelay.core.type_catalog import RegisteredType, TypeCatalog


class Empty(BaseModel):
    pass


def client(*patterns: str, admin: bool = False) -> Client:
    return Client(uuid.uuid4(), "c", admin, type_patterns=patterns or None)


def test_types_are_comma_separated_trimmed_and_kept_once_in_order() -> None:
    assert parse_type_patterns(" shop.* , mail.send,shop.*") == ("shop.*", "mail.send")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "at least one"),
        ("  ", "at least one"),
        ("a,,b", "is empty"),
        ("shop.[ab]", "may hold only"),
        ("shop.%", "may hold only"),
        ("a\\b", "may hold only"),
        ("x" * 201, "at most 200 characters"),
        (",".join(f"t{n}" for n in range(TYPE_PATTERNS_MAX + 1)), "at most 50"),
    ],
)
def test_bad_patterns_are_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_type_patterns(text)


def test_an_empty_list_of_patterns_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        check_type_patterns([])


@pytest.mark.parametrize(
    ("pattern", "job_type", "matches"),
    [
        ("shop.*", "shop.tasks.confirm_order", True),  # * crosses dots
        ("shop.*", "shop", False),
        ("shop.*", "workshop.x", False),  # the whole type, not a part of it
        ("mail.send", "mail.send", True),
        ("mail.send", "Mail.send", False),  # case-sensitive
        ("mail.send_?", "mail.send_1", True),
        ("mail.send_?", "mail.sendX1", False),  # _ is a character, not a wildcard
        ("*", "anything.at.all", True),
    ],
)
def test_a_pattern_matches_a_whole_type_as_a_shell_glob(
    pattern: str, job_type: str, matches: bool
) -> None:
    assert matches_any([pattern], job_type) is matches


def test_patterns_decide_alone_when_a_client_has_them() -> None:
    assert may_submit(client("ops.*"), "ops.wipe", open_to_api=False)
    assert not may_submit(client("ops.*"), "catalog.export", open_to_api=True)
    assert not may_submit(client("ops.*", admin=True), "catalog.export", open_to_api=True)


def test_without_patterns_a_client_submits_open_types_and_an_admin_every_type() -> None:
    assert may_submit(client(), "catalog.export", open_to_api=True)
    assert not may_submit(client(), "shop.tasks.confirm_order", open_to_api=False)
    assert may_submit(client(admin=True), "shop.tasks.confirm_order", open_to_api=False)


def test_a_type_declared_api_false_is_closed_in_the_catalog_loaded_or_registered() -> None:
    registry = Registry()

    @registry.job("ops.wipe", Empty, api=False)
    def wipe(context: object, payload: Empty) -> dict[str, object]:
        return {}

    @registry.job("ops.open", Empty)
    def open_one(context: object, payload: Empty) -> dict[str, object]:
        return {}

    registered = {
        "billing.refund": RegisteredType("billing.refund", {}, api=False),
        "billing.view": RegisteredType("billing.view", {}),
    }
    catalog = TypeCatalog(registry, registered)

    assert not catalog.open_to_api("ops.wipe")
    assert catalog.open_to_api("ops.open")
    assert not catalog.open_to_api("billing.refund")
    assert catalog.open_to_api("billing.view")
    assert catalog.open_to_api("no.such.type")  # answered unknown_job_type, not 403
    assert RegisteredType.of(registry.get("ops.wipe"), by="test").api is False


def test_api_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="api must be True or False"):
        Registry().job("x", Empty, api="no")  # type: ignore[arg-type]
