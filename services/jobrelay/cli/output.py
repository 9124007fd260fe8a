"""How the CLI shows things to a person: a job's trace as lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jobrelay.core.trace import timeline


def json_value(value: Any) -> str:
    """A stored value (a result, a payload) as the JSON it is, on one line."""
    return json.dumps(value, ensure_ascii=False, default=str)


def aligned(table: Sequence[Sequence[str]]) -> list[str]:
    """A table's rows (its header first) as lines, each column as wide as its widest cell."""
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]


def state_line(state: str, why: str) -> str:
    """The state and why it stopped, the state word once (``quarantined: code: error``)."""
    return why if why.startswith(f"{state}:") else f"{state}: {why}"


def render_trace(trace: dict[str, Any]) -> str:
    """The trace as lines a person reads top to bottom."""
    intent = trace["intent"]
    deliveries = trace["deliveries"]
    lines = [
        f"job {trace['job_id']} ({trace['type']})",
        f"  intent     recorded {intent['recorded_at']} for client {intent['client']!r}, "
        f"key {intent['idempotency_key']!r}",
    ]
    for row in trace["outbox"]:
        if row["published_at"]:
            state = f"published {row['published_at']}"
        else:
            state = f"NOT published yet, next try {row['due_at']}"
        error = f", last error: {row['last_error']}" if row["last_error"] else ""
        lines.append(
            f"  outbox #{row['id']:<4} written {row['created_at']}, {state} "
            f"after {row['publish_attempts']} attempt(s){error}"
        )
    deferred = deliveries.get("deferred", 0)
    lines.append(
        f"  deliveries {deliveries['total']} ({deliveries['claimed']} claimed, "
        f"{deliveries['duplicate']} duplicate{f', {deferred} deferred' if deferred else ''}); "
        f"attempts {trace['attempts']} of {trace['max_attempts']}"
        f"{_before_replay(trace)}; retries {trace['retries_scheduled']}; lease expiries "
        f"{trace['lease_expiries']}; stale completions rejected "
        f"{trace['stale_completions_rejected']}; replays {trace['replays']}"
    )
    result = trace["result"]
    if result:
        lines.append(
            f"  result     stored {result['stored_at']} by attempt {result['attempt']}: "
            f"{json_value(result['value'])}"
        )
    else:
        lines.append("  result     none stored")
    lines.append(f"  state      {state_line(trace['state'], trace['why'])}")
    lines.append("  journal")
    for line in timeline(trace):
        lines.extend(_timeline_lines(line))
    failure = trace.get("last_failure")
    if failure and failure["error"].get("traceback"):
        lines.append(f"  last failure (attempt {failure['attempt']}, {failure['at']})")
        lines.extend(f"    {line}" for line in failure["error"]["traceback"].rstrip().splitlines())
    return "\n".join(lines)


def _timeline_lines(line: dict[str, Any]) -> list[str]:
    """A journal entry, a recorded step or a signal, as the trace's lines."""
    if line["line"] == "step":
        return [f"    {line['at']}  #{line['attempt']:<2} {step_words(line)}"]
    if line["line"] == "signal":
        taken = f", taken by {line['taken_by']!r} {line['taken_at']}" if line["taken_by"] else ""
        return [f"    {line['at']}      signal {line['name']!r} sent{taken}"]
    detail = f"  {line['detail']}" if line["detail"] else ""
    lines = [f"    {line['at']}  #{line['attempt']:<2} {line['event']}{detail}"]
    error = line.get("error")
    if error:
        message = str(error.get("message") or "").replace("\n", "\n          ")
        lines.append(f"        {error.get('class')}: {message}")
    return lines


def step_words(step: dict[str, Any]) -> str:
    """A recorded step in words: its kind, name and status, with a sleep's wake time, a wait's
    deadline or a child's id (and its value, when the view holds it)."""
    words = f"{step['kind']} {step['name']!r} {step['status'].replace('_', ' ')}"
    if step.get("wake_at"):
        words += f", until {step['wake_at']}"
    if step.get("child_id"):
        words += f", child {step['child_id']}"
    if "value" in step:
        words += f": {json_value(step['value'])}"
    return words


def _before_replay(trace: dict[str, Any]) -> str:
    """After the attempts of a replayed job: how many its earlier runs used."""
    replayed = trace.get("replayed_attempts") or 0
    return f" ({replayed} before its latest replay)" if replayed else ""


SHOWN_FIELDS = (
    "id",
    "type",
    "state",
    "no_consumer",
    "attempts",
    "max_attempts",
    "replayed_attempts",
    "created_at",
    "updated_at",
    "finished_at",
    "last_error_code",
    "last_error",
    "result",
    "wake_at",
    "waiting_for",
    "parent_job_id",
    "sequence_key",
    "blocked_by",
)


def render_job(view: dict[str, Any]) -> str:
    """The job's fields that have a value, one a line (``replayed_attempts`` once replayed,
    ``no_consumer`` only when true), then its recorded steps, one a line."""
    lines = [
        f"{field:16} {json_value(value) if isinstance(value, dict) else value}"
        for field in SHOWN_FIELDS
        if (value := view.get(field)) is not None
        and value is not False
        and not (field == "replayed_attempts" and value == 0)  # never replayed: nothing to say
    ]
    steps = view.get("steps") or []
    if steps:
        lines.append("steps")
        lines.extend(f"  {step['at']}  #{step['attempt']:<2} {step_words(step)}" for step in steps)
    return "\n".join(lines)
