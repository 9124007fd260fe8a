"""Flow control's values (docs/flow-control.md): a type's rate, its limit, and the limit in force.

Pure: the registry states a type's limit with these, the runtime overrides (``type_limits``)
read into them, and the dispatcher and the consumers decide with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from jobrelay_client.flow import check_priority as check_priority

# "/s" and "/m": the periods a rate may name, in seconds (``type_limits.rate_period_seconds``).
RATE_PERIODS = {"s": 1, "m": 60}
_PERIOD_NAMES = {seconds: name for name, seconds in RATE_PERIODS.items()}


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts per ``period_seconds`` (1 or 60)."""

    count: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a rate counts at least 1 start, not {self.count}")
        if self.period_seconds not in _PERIOD_NAMES:
            raise ValueError(f"a rate's period is 1 s or 60 s, not {self.period_seconds} s")

    @property
    def interval(self) -> float:
        """Seconds between two starts at this rate."""
        return self.period_seconds / self.count

    def __str__(self) -> str:
        return f"{self.count}/{_PERIOD_NAMES[self.period_seconds]}"


def parse_rate(text: str) -> Rate:
    """``"10/s"`` or ``"600/m"``: a whole number of starts, at least 1, per second or minute."""
    return Rate(*_per_period(text, RATE_PERIODS, "rate", "10/s or 600/m"))


def _per_period(text: str, periods: Mapping[str, int], what: str, example: str) -> tuple[int, int]:
    """``"N/p"`` as (N, the seconds of period p of ``periods``), N a whole number of at least
    1; else a ValueError naming ``what`` and showing ``example``."""
    count, slash, period = text.strip().partition("/")
    if (
        not slash
        or period not in periods
        or not (count.isascii() and count.isdigit())
        or int(count) < 1
    ):
        names = " or ".join(f"N/{name}" for name in periods)
        raise ValueError(
            f"invalid {what} {text[:50]!r}: write {names} with a whole N of at least 1 "
            f"(for example {example})"
        )
    return int(count), periods[period]


# "/s", "/m" and "/h": the periods a throttle may name, in seconds.
THROTTLE_PERIODS = {"s": 1, "m": 60, "h": 3600}
_THROTTLE_NAMES = {seconds: name for name, seconds in THROTTLE_PERIODS.items()}


@dataclass(frozen=True)
class Throttle:
    """At most ``count`` submissions accepted in any ``period_seconds`` (per throttle key when
    the submission has one): one over that is refused (``429 throttled``), where a rate would
    accept it and delay its start (docs/flow-control.md, "Throttle")."""

    count: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a throttle accepts at least 1 submission, not {self.count}")
        if self.period_seconds not in _THROTTLE_NAMES:
            raise ValueError(
                f"a throttle's period is 1 s, 60 s or 3600 s, not {self.period_seconds} s"
            )

    def __str__(self) -> str:
        return f"{self.count}/{_THROTTLE_NAMES[self.period_seconds]}"


def parse_throttle(text: str) -> Throttle:
    """``"5/s"``, ``"100/m"`` or ``"1000/h"``: a whole number of submissions, at least 1, per
    second, minute or hour."""
    return Throttle(*_per_period(text, THROTTLE_PERIODS, "throttle", "5/s or 100/h"))


@dataclass(frozen=True)
class Limit:
    """A type's limit: at most ``concurrency`` running at once and ``rate`` starts, per
    concurrency key when ``per_key``, over the whole type otherwise. None: no such limit."""

    concurrency: int | None = None
    rate: Rate | None = None
    per_key: bool = False

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"a concurrency limit is at least 1, not {self.concurrency}")


@dataclass(frozen=True)
class LimitInForce:
    """The limit that holds for a type now: the code's (the registry's), or a runtime override
    (a row of ``type_limits``), which wins while it exists."""

    type: str
    limit: Limit
    source: Literal["code", "runtime"]
    # The throttle in force: the runtime row's when it has one, else the code's (a row without
    # a throttle leaves the code's in force; it is not a concurrency or a rate).
    throttle: Throttle | None = None


def limit_key(limit: Limit, concurrency_key: str | None) -> str:
    """The key a job counts under: its concurrency key when the limit is per key ('' for a job
    without one), else '' (one count for the whole type)."""
    if not limit.per_key:
        return ""
    return concurrency_key or ""


def limit_in_force(
    job_type: str,
    code: Mapping[str, Limit],
    runtime: Mapping[str, Limit],
    throttles: Mapping[str, Throttle] | None = None,
) -> LimitInForce:
    """The runtime row while there is one, else the code's limit (no limit at all: a ``Limit``
    of nothing, from the code); ``throttles``: the throttle in force by type (runtime's, else
    code's)."""
    throttle = (throttles or {}).get(job_type)
    if job_type in runtime:
        return LimitInForce(job_type, runtime[job_type], "runtime", throttle)
    return LimitInForce(job_type, code.get(job_type, Limit()), "code", throttle)


def limits_in_force(code: Mapping[str, Limit], runtime: Mapping[str, Limit]) -> dict[str, Limit]:
    """Every type limited now: a runtime row wins over the code's limit (a row with neither
    bound lifts it); types limited by neither are left out."""
    merged = {**code, **runtime}
    return {
        job_type: limit
        for job_type, limit in merged.items()
        if limit.concurrency is not None or limit.rate is not None
    }
