"""A submission's flow control fields and the checks the client makes before sending one:
standard library only, so that the slim client and the server's pure core
(``jobrelay/core/jobs.py``, which re-exports them) read one copy."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict

from jobrelay_client.bounds import (
    FLOW_KEY_MAX,
    IDEMPOTENCY_KEY_MAX,
    MAX_DELAY_SECONDS,
    PRIORITY_MAX,
    PRIORITY_MIN,
)


def check_priority(priority: object) -> int:
    """A priority: a whole number from PRIORITY_MIN to PRIORITY_MAX (higher runs first), or a
    ValueError saying so."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be a whole number, not {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority}")
    return priority


class OnDuplicate(StrEnum):
    """What a unique submission gets when a job of its key answers it (docs/flow-control.md,
    "Deduplication window")."""

    RETURN_EXISTING = "return_existing"  # 200 with that job's view, "deduplicated": true
    REJECT = "reject"  # 409 duplicate_job naming that job


_FLOW_KEYS = ("concurrency_key", "unique_key", "sequence_key", "throttle_key")
_FLOW_SECONDS = ("unique_for_seconds", "debounce_seconds", "debounce_max_seconds")


@dataclass(frozen=True)
class Flow:
    """A job's flow control fields, as a submission asks for them or its type gives them
    (``Registry.flow_defaults``): what runs next (priority, concurrency key) and the order and
    submission policies (docs/flow-control.md): a sequence, a unique key with its window and
    its answer to a duplicate, a debounce, a throttle's key."""

    priority: int | None = None
    concurrency_key: str | None = None
    unique_key: str | None = None
    sequence_key: str | None = None
    """Jobs of a client and sequence key run one at a time, in the order they were accepted."""

    unique_for_seconds: float | None = None
    """The unique key also holds against a job of it that ended (not cancelled) this recently."""

    on_duplicate: OnDuplicate | str | None = None
    """None: ``return_existing``. Given as its text (from code), it is made the enum."""

    debounce_seconds: float | None = None
    """A submission of a unique key whose job has not started replaces its payload and moves
    its start to now + this."""

    debounce_max_seconds: float | None = None
    """The latest start a debounce may move to, counted from the job's first submission."""

    throttle_key: str | None = None
    """The key its type's throttle counts it under; None: the type's one count."""

    def __post_init__(self) -> None:
        if self.priority is not None:
            check_priority(self.priority)
        for name in _FLOW_KEYS:
            key = getattr(self, name)
            if key is not None and not is_valid_flow_key(key):
                raise ValueError(f"{name} is a text of 1 to {FLOW_KEY_MAX} characters, without NUL")
        for name in _FLOW_SECONDS:
            seconds = getattr(self, name)
            if seconds is not None and not is_policy_seconds(seconds):
                raise ValueError(
                    f"{name} is a number of seconds above 0, at most {MAX_DELAY_SECONDS}"
                )
        if self.on_duplicate is not None and self.on_duplicate not in set(OnDuplicate):
            raise ValueError("on_duplicate is return_existing or reject")
        if self.on_duplicate is not None:  # its text, from code (enqueue, the clients): the enum
            object.__setattr__(self, "on_duplicate", OnDuplicate(self.on_duplicate))

    def over(self, defaults: Flow) -> Flow:
        """These fields, each one not given taken from ``defaults``."""
        if defaults == _NO_FLOW:  # a plain job's, on every accept: no new value to check
            return self
        return Flow(
            **{
                name: mine if (mine := getattr(self, name)) is not None else getattr(defaults, name)
                for name in _FLOW_FIELDS
            }
        )

    def given(self) -> dict[str, Any]:
        """The fields given, by name: what the idempotency fingerprint adds
        (``core/fingerprint.py``)."""
        fields = {name: getattr(self, name) for name in _FLOW_FIELDS}
        return {name: value for name, value in fields.items() if value is not None}

    @property
    def is_policed(self) -> bool:
        """Its accept runs the order and submission policies (``db/policed_accept.py``): a
        sequence, a window, a debounce, a reject or a throttle key. A plain accept does not."""
        return (
            self.sequence_key is not None
            or self.unique_for_seconds is not None
            or self.on_duplicate is not None
            or self.debounce_seconds is not None
            or self.throttle_key is not None
        )

    def check_policies(self, *, scheduled: bool) -> None:
        """The rules between the fields of a job's flow (this one merged over its type's): a
        ValueError naming the first broken. ``scheduled``: the submission gave a run_at or a
        delay, which a debounce decides itself."""
        needs_unique = ("unique_for_seconds", "on_duplicate", "debounce_seconds")
        for name in needs_unique:
            if getattr(self, name) is not None and self.unique_key is None:
                raise ValueError(f"{name} needs a unique_key")
        if self.debounce_max_seconds is not None:
            if self.debounce_seconds is None:
                raise ValueError("debounce_max_seconds needs debounce_seconds")
            if self.debounce_max_seconds < self.debounce_seconds:
                raise ValueError("debounce_max_seconds is at least debounce_seconds")
        if self.debounce_seconds is not None and scheduled:
            raise ValueError("debounce_seconds decides when the job runs: no run_at or delay")


_FLOW_FIELDS = tuple(Flow.__dataclass_fields__)
_NO_FLOW = Flow()


class PolicyOptions(TypedDict, total=False):
    """The order and submission policies as keyword arguments of the Python ways of
    submitting (``JobDefinition.enqueue``, the testing kit's recorder): ``Flow``'s fields of
    the same names, which check them."""

    sequence_key: str | None
    unique_for_seconds: float | None
    on_duplicate: OnDuplicate | str | None
    debounce_seconds: float | None
    debounce_max_seconds: float | None
    throttle_key: str | None


def is_policy_seconds(seconds: object) -> bool:
    """A window or a debounce: a number of seconds above 0, at most a year."""
    return (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and 0 < seconds <= MAX_DELAY_SECONDS
    )


def is_valid_flow_key(key: object) -> bool:
    """A concurrency or unique key: 1-200 characters, no NUL (PostgreSQL text has none)."""
    return isinstance(key, str) and 1 <= len(key) <= FLOW_KEY_MAX and "\x00" not in key


def is_valid_idempotency_key(key: str | None) -> bool:
    """1–200 visible ASCII characters (0x21–0x7E)."""
    return (
        key is not None
        and 1 <= len(key) <= IDEMPOTENCY_KEY_MAX
        and all("!" <= ch <= "~" for ch in key)
    )
