"""The geometry of what the console draws as inline SVG, computed on the server: the last hour's
finished jobs per minute (the overview) and a job's journal on a time line (one job's page).

Pure: values in, numbers and labels out. The templates only place them; no markup is built
here, so everything a template shows goes through its escaping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobrelay.core.jobs import JournalEntry
from jobrelay.core.stats import FinishedMinute

CHART_WIDTH = 720
CHART_HEIGHT = 180
# Room for the y labels on the left and the x labels below.
PLOT_LEFT = 44
PLOT_TOP = 8
PLOT_BOTTOM = 22
LABEL_EVERY_MINUTES = 10
TIMELINE_WIDTH = 720
TIMELINE_MARGIN = 12


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class Bar:
    """One minute: succeeded stacked under quarantined."""

    x: float
    width: float
    succeeded_y: float
    succeeded_height: float
    quarantined_y: float
    quarantined_height: float
    title: str


@dataclass(frozen=True)
class MinuteChart:
    width: int
    height: int
    plot_left: int
    plot_top: int
    plot_width: int
    plot_height: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    succeeded: int
    quarantined: int


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 × 10ⁿ at least ``value`` (at least 1): the chart's top."""
    if value <= 1:
        return 1
    power = int(10 ** math.floor(math.log10(value)))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power  # not reached: 10 × power is always at least value


def minute_chart(minutes: Sequence[FinishedMinute]) -> MinuteChart:
    plot_width = CHART_WIDTH - PLOT_LEFT - 4
    plot_height = CHART_HEIGHT - PLOT_TOP - PLOT_BOTTOM
    top = nice_ceiling(max((m.succeeded + m.quarantined for m in minutes), default=0))
    slot = plot_width / max(len(minutes), 1)
    baseline = PLOT_TOP + plot_height

    def height_of(count: int) -> float:
        return plot_height * count / top

    bars = []
    x_ticks = []
    for index, minute in enumerate(minutes):
        x = PLOT_LEFT + index * slot
        succeeded = height_of(minute.succeeded)
        quarantined = height_of(minute.quarantined)
        bars.append(
            Bar(
                x=round(x + 1, 1),
                width=round(max(slot - 2, 1), 1),
                succeeded_y=round(baseline - succeeded, 1),
                succeeded_height=round(succeeded, 1),
                quarantined_y=round(baseline - succeeded - quarantined, 1),
                quarantined_height=round(quarantined, 1),
                title=f"{minute.minute:%H:%M} UTC: {minute.succeeded} succeeded, "
                f"{minute.quarantined} quarantined",
            )
        )
        if minute.minute.minute % LABEL_EVERY_MINUTES == 0:
            x_ticks.append(Tick(round(x + slot / 2, 1), f"{minute.minute:%H:%M}"))
    y_ticks = [
        Tick(round(baseline - plot_height * value / top, 1), str(value))
        for value in sorted({0, top // 2, top})
    ]
    return MinuteChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        plot_left=PLOT_LEFT,
        plot_top=PLOT_TOP,
        plot_width=plot_width,
        plot_height=plot_height,
        bars=bars,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        succeeded=sum(m.succeeded for m in minutes),
        quarantined=sum(m.quarantined for m in minutes),
    )


# --- one job's journal on a time line ------------------------------------------------------------

# What each journal event looks like (a CSS class of console.css); any other is "other".
EVENT_KINDS = {
    "received": "intent",
    "published": "publish",
    "redispatched": "publish",
    "claimed": "attempt",
    "duplicate_delivery": "warning",
    "deferred": "warning",
    "lease_expired": "warning",
    "stale_completion_rejected": "warning",
    "retry_scheduled": "retry",
    "cancel_requested": "warning",
    "succeeded": "success",
    "quarantined": "failure",
    "replayed": "intent",
    "cancelled": "failure",
}


@dataclass(frozen=True)
class Mark:
    """One journal entry: where it sits on the line, and what the list beside it says."""

    x: float
    kind: str
    event: str
    attempt: int
    at: datetime
    offset: str
    detail: str | None
    error: dict[str, Any] | None


@dataclass(frozen=True)
class Timeline:
    width: int
    start: float
    end: float
    marks: list[Mark]
    span: str


def elapsed(seconds: float) -> str:
    """A duration as a person reads it: ``0.012 s``, ``4.2 s``, ``3 min 5 s``, ``2 h 4 min``."""
    if seconds < 1:
        return f"{seconds:.3f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def timeline(events: Sequence[JournalEntry]) -> Timeline:
    """The journal in order, each entry placed by its time since the first one."""
    start = TIMELINE_MARGIN
    end = TIMELINE_WIDTH - TIMELINE_MARGIN
    if not events:
        return Timeline(TIMELINE_WIDTH, start, end, [], elapsed(0))
    first = events[0].at
    span = max((event.at - first).total_seconds() for event in events)
    marks = []
    for event in events:
        since = (event.at - first).total_seconds()
        x = start + (end - start) * (since / span if span > 0 else 0)
        marks.append(
            Mark(
                x=round(x, 1),
                kind=EVENT_KINDS.get(event.event, "other"),
                event=event.event,
                attempt=event.attempt,
                at=event.at,
                offset="+" + elapsed(since),
                detail=event.detail,
                error=event.error,
            )
        )
    return Timeline(TIMELINE_WIDTH, start, end, marks, elapsed(span))
