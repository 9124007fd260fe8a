"""Every SQL statement that changes ``jobs.state`` makes a transition declared in the core
(``core/states.py``), guarded on exactly its source states, its lease and its token."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import TextClause

from jobrelay.core.states import (
    ALL_TRANSITIONS,
    CANCELLABLE_STATES,
    TRANSITIONS,
    JobEvent,
    JobState,
    Lease,
    Transition,
)
from jobrelay.db import queries as q

# The SET list of an UPDATE of jobs: from SET up to its FROM or WHERE.
_UPDATE_JOBS = re.compile(r"\bUPDATE\s+jobs(?:\s+\w+)?\s+SET\s+(.*?)\s+(?:FROM|WHERE)\b", re.S)
_SET_STATE = re.compile(r"(?:^|,)\s*state\s*=\s*(CASE\b.*?\bEND|'\w+')", re.S)
_STATE_TEST = re.compile(r"\b(?:\w+\.)?state\s*(?:=\s*'(\w+)'|IN\s*\(([^)]*)\))")
_LITERAL = re.compile(r"'(\w+)'")
_CHOSEN = re.compile(r"\b(?:THEN|ELSE)\s+'(\w+)'")
_JOURNAL = re.compile(r"\bSELECT\s+[\w.]+\s*,\s*(CASE\b.*?\bEND|'\w+')", re.S)


def _values(expression: str) -> list[str]:
    """The values an expression can take: a literal, or a CASE's THEN and ELSE literals (its
    WHEN literals are what it tests, not what it writes)."""
    if expression.startswith("CASE"):
        return _CHOSEN.findall(expression)
    return _LITERAL.findall(expression)


def _state_writers() -> dict[str, str]:
    writers = {}
    for name, value in vars(q).items():
        if not isinstance(value, TextClause):
            continue
        if any(_SET_STATE.search(m.group(1)) for m in _UPDATE_JOBS.finditer(value.text)):
            writers[name] = value.text
    return writers


def _set_lists(sql: str) -> list[str]:
    return [m.group(1) for m in _UPDATE_JOBS.finditer(sql)]


def _targets(sql: str) -> set[JobState | None]:
    """The states the statement writes; None where it keeps the row's own (``ELSE j.state``)."""
    targets: set[JobState | None] = set()
    for set_list in _set_lists(sql):
        for match in _SET_STATE.finditer(set_list):
            expression = match.group(1)
            targets |= {JobState(value) for value in _values(expression)}
            if re.search(r"\bELSE\s+(?:\w+\.)?state\b", expression):
                targets.add(None)
    return targets


def _guard_text(sql: str) -> str:
    """The statement without its SET lists: what is left tests the row, never writes it."""
    for set_list in _set_lists(sql):
        sql = sql.replace(set_list, " ")
    return sql


def _sources(sql: str) -> set[JobState]:
    sources: set[JobState] = set()
    for equal, listed in _STATE_TEST.findall(_guard_text(sql)):
        sources |= {JobState(value) for value in _LITERAL.findall(listed or f"'{equal}'")}
    return sources


def _journal(sql: str) -> set[JobEvent]:
    events: set[JobEvent] = set()
    for part in sql.split("INSERT INTO job_events")[1:]:
        part = part.split("INSERT INTO")[0]
        for match in _JOURNAL.finditer(part):
            events |= {JobEvent(value) for value in _values(match.group(1))}
    return events


def _problems(name: str, sql: str, transitions: tuple[Transition, ...]) -> list[str]:
    problems = []
    declared_sources = set().union(*(t.source for t in transitions))
    if _sources(sql) != declared_sources:
        problems.append(f"{name} guards on {_sources(sql)}, declared {declared_sources}")
    declared_targets = {t.target for t in transitions}
    if _targets(sql) != declared_targets:
        problems.append(f"{name} writes {_targets(sql)}, declared {declared_targets}")
    guard = _guard_text(sql)
    fenced = bool(re.search(r"\blease_token\s*=\s*(?::lease_token|a\.asked_token)\b", guard))
    if fenced != any(t.fenced for t in transitions):
        problems.append(f"{name} fenced by the lease token: {fenced}, declared the opposite")
    for lease, test in (
        (Lease.LIVE, "lease_until > now()"),
        (Lease.EXPIRED, "lease_until < now()"),
    ):
        if (test in guard) != any(t.lease is lease for t in transitions):
            problems.append(f"{name}: {test!r} in its guard disagrees with the declared lease")
    declared_journal = {event for t in transitions for event in t.journal}
    if _journal(sql) != declared_journal:
        problems.append(f"{name} journals {_journal(sql)}, declared {declared_journal}")
    return problems


def test_every_statement_that_writes_a_state_is_declared() -> None:
    assert set(_state_writers()) == set(q.STATE_WRITES)


@pytest.mark.parametrize("name", sorted(q.STATE_WRITES))
def test_the_statement_agrees_with_its_transitions(name: str) -> None:
    sql = getattr(q, name).text
    assert _problems(name, sql, q.STATE_WRITES[name]) == []


def test_a_guard_on_other_states_than_declared_is_caught() -> None:
    sql = q.CANCEL_JOB.text.replace("state IN ('queued', 'retrying')", "state IN ('queued')")
    assert sql != q.CANCEL_JOB.text
    assert _problems("CANCEL_JOB", sql, q.STATE_WRITES["CANCEL_JOB"])


def test_a_fenced_write_without_its_token_is_caught() -> None:
    sql = q.FINISH_JOBS.text.replace("lease_token = a.asked_token AND", "")
    assert sql != q.FINISH_JOBS.text
    assert _problems("FINISH_JOBS", sql, q.STATE_WRITES["FINISH_JOBS"])


def test_a_finish_that_journals_other_events_than_declared_is_caught() -> None:
    sql = q.FINISH_JOBS.text.replace("THEN 'retry_scheduled'", "THEN 'claimed'")
    assert sql != q.FINISH_JOBS.text
    assert _problems("FINISH_JOBS", sql, q.STATE_WRITES["FINISH_JOBS"])


def test_every_exit_of_a_worker_from_running_is_one_statement() -> None:
    worker_exits = {"complete", "retry", "quarantine", "cancel_running"}
    makers = {
        name for name, made in q.STATE_WRITES.items() if {t.name for t in made} & worker_exits
    }
    assert makers == {"FINISH_JOBS"}


def test_every_transition_is_made_by_exactly_one_statement() -> None:
    made = [t for transitions in q.STATE_WRITES.values() for t in transitions]
    assert sorted(t.name for t in made) == sorted(t.name for t in ALL_TRANSITIONS)


def test_the_table_of_moves_is_derived_from_the_transitions() -> None:
    assert TRANSITIONS[JobState.QUEUED] == {
        JobState.RUNNING,
        JobState.CANCELLED,
        JobState.QUARANTINED,  # attempts exhausted, delivery limit, unknown type
    }
    assert TRANSITIONS[JobState.RUNNING] == {
        JobState.RUNNING,  # re-claim of an expired lease
        JobState.SUCCEEDED,
        JobState.RETRYING,
        JobState.QUARANTINED,
        JobState.QUEUED,  # release, rescue
        JobState.CANCELLED,  # its worker carried out a cancel request
    }
    assert TRANSITIONS[JobState.QUARANTINED] == {JobState.QUEUED}
    assert {JobState.QUEUED, JobState.RETRYING, JobState.RUNNING} == CANCELLABLE_STATES
