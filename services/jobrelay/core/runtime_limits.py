"""A runtime limit as an operator gives it (``PUT /v1/admin/limits/{type}``, ``jobrelay limits
set``, the console's form), checked once for all three, and the limit in force as they show it.
"""

from __future__ import annotations

from typing import Any

from jobrelay.core.flow import Limit, LimitInForce, Rate, Throttle, parse_rate, parse_throttle

# Far above any real need, and within the columns of ``type_limits`` (integer).
CONCURRENCY_MAX = 100_000
RATE_COUNT_MAX = 1_000_000
THROTTLE_COUNT_MAX = 1_000_000


def check_concurrency(concurrency: int | None) -> int | None:
    if concurrency is not None and not 1 <= concurrency <= CONCURRENCY_MAX:
        raise ValueError(f"a concurrency limit is from 1 to {CONCURRENCY_MAX:,}, not {concurrency}")
    return concurrency


def check_rate(text: str | None) -> Rate | None:
    """``"10/s"``, ``"600/m"`` or None; a ValueError that names the text given."""
    if text is None:
        return None
    rate = parse_rate(text)
    if rate.count > RATE_COUNT_MAX:
        raise ValueError(f"invalid rate {text[:50]!r}: at most {RATE_COUNT_MAX:,} per period")
    return rate


def check_throttle(text: str | None) -> Throttle | None:
    """``"5/s"``, ``"100/m"``, ``"1000/h"`` or None; a ValueError that names the text given."""
    if text is None:
        return None
    throttle = parse_throttle(text)
    if throttle.count > THROTTLE_COUNT_MAX:
        raise ValueError(
            f"invalid throttle {text[:50]!r}: at most {THROTTLE_COUNT_MAX:,} per period"
        )
    return throttle


def throttle_only(limit: Limit, throttle: Throttle | None) -> bool:
    """Whether an operator gave a throttle and nothing else: the concurrency and rate in force
    then stay as they are (a throttle alone never lifts them, ``FlowStore.set_limit``)."""
    return throttle is not None and limit == Limit()


def runtime_limit(concurrency: int | None, rate: str | None, per_key: bool) -> Limit:
    """The limit an operator sets; both None is no limit at all (it lifts the code's until
    cleared). ``per_key`` needs a limit to apply to, as in the registry."""
    parsed = check_rate(rate)
    check_concurrency(concurrency)
    if per_key and concurrency is None and parsed is None:
        raise ValueError("per_key needs a concurrency or a rate to apply to")
    return Limit(concurrency=concurrency, rate=parsed, per_key=per_key)


def limit_document(limit: LimitInForce) -> dict[str, Any]:
    """The limit in force as the API, the CLI's ``--json`` and the console show it."""
    rate = limit.limit.rate
    return {
        "type": limit.type,
        "concurrency": limit.limit.concurrency,
        "rate": None if rate is None else str(rate),
        "per_key": limit.limit.per_key,
        "source": limit.source,
        "throttle": None if limit.throttle is None else str(limit.throttle),
    }


def limit_line(limit: LimitInForce) -> str:
    """One line of ``jobrelay limits list`` and the console's table."""
    parts = []
    if limit.limit.concurrency is not None:
        parts.append(f"concurrency={limit.limit.concurrency}")
    if limit.limit.rate is not None:
        parts.append(f"rate={limit.limit.rate}")
    if limit.throttle is not None:
        parts.append(f"throttle={limit.throttle}")
    if not parts:
        parts.append("no limit")
    if limit.limit.per_key:
        parts.append("per key")
    return f"{limit.type}  {' '.join(parts)}  ({limit.source})"
