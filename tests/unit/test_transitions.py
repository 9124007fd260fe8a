"""Every SQL statement that changes ``jobs.state`` makes transitions declared in the core
(``core/states.py``), and is guarded by the conditions built from those transitions
(``db/queries.py``: ``_guard``, ``STATE_WRITES``). Read from the data that builds the guards,
never by parsing SQL; what a guard lets through is checked in PostgreSQL itself
(tests/integration/test_transition_guards.py)."""

from __future__ import annotations

import dataclasses

import pytest

from jobrelay.core.states import (
    ALL_TRANSITIONS,
    CANCEL,
    TERMINAL_STATES,
    JobState,
    Lease,
    Transition,
)
from jobrelay.db import queries as q
from tests.support.transitions import CANCELLABLE_STATES, TRANSITIONS

# The token a fenced guard compares with: a parameter, or a group's column of tokens.
_TOKENS = (":lease_token", "a.asked_token")


def _guarded_by(sql: str, transition: Transition) -> bool:
    return any(q._guard(transition, token) in sql for token in _TOKENS)


@pytest.mark.parametrize("name", sorted(q.STATE_WRITES))
def test_the_statement_is_guarded_by_the_guard_of_each_of_its_transitions(name: str) -> None:
    sql = getattr(q, name).text
    assert [t.name for t in q.STATE_WRITES[name] if not _guarded_by(sql, t)] == []


def test_a_guard_on_other_states_than_declared_is_caught() -> None:
    narrower = dataclasses.replace(CANCEL, source=frozenset({JobState.QUEUED}))
    assert not _guarded_by(q.CANCEL_JOB.text, narrower)


def test_a_fenced_transition_is_guarded_by_its_token() -> None:
    for transition in ALL_TRANSITIONS:
        unfenced = dataclasses.replace(transition, fenced=False)
        if transition.fenced:
            assert q._guard(transition).startswith("lease_token = :lease_token AND ")
            assert q._guard(transition) != q._guard(unfenced)
        else:
            assert ":lease_token" not in q._guard(transition)


def test_a_lease_asked_of_a_running_job_changes_its_guard() -> None:
    running = [t for t in ALL_TRANSITIONS if JobState.RUNNING in t.source]
    for transition in running:
        others = {dataclasses.replace(transition, lease=lease) for lease in Lease} - {transition}
        assert all(q._guard(other) != q._guard(transition) for other in others)


def test_the_statements_that_share_one_guard_agree_on_it() -> None:
    with pytest.raises(ValueError, match="guarded differently"):
        q._shared_guard((q.COMPLETE, q.RESCUE), ":lease_token")


def test_every_exit_of_a_worker_from_running_is_one_statement() -> None:
    worker_exits = {"complete", "retry", "quarantine", "cancel_running"}
    makers = {
        name for name, made in q.STATE_WRITES.items() if {t.name for t in made} & worker_exits
    }
    assert makers == {"FINISH_JOBS"}


def test_every_transition_is_made_by_exactly_one_statement_but_the_shared_ones() -> None:
    made = [t for transitions in q.STATE_WRITES.values() for t in transitions]
    alone = [t.name for t in made if t not in q.SHARED_TRANSITIONS]
    assert sorted(alone) == sorted(t.name for t in ALL_TRANSITIONS if t not in q.SHARED_TRANSITIONS)
    assert {t.name for t in made} == {t.name for t in ALL_TRANSITIONS}


def test_every_statement_that_can_end_a_job_of_a_workflow_moves_its_dependents() -> None:
    ending = {
        name
        for name, made in q.STATE_WRITES.items()
        if any(t.target in TERMINAL_STATES for t in made) and name != "CANCEL_WORKFLOW_JOBS"
    }
    moving = {name for name, made in q.STATE_WRITES.items() if q.DEPENDENCY_FAILED in made}
    assert ending == moving
    for name in moving:
        assert "moved_dependents AS (" in getattr(q, name).text


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
    assert TRANSITIONS[JobState.WAITING] == {JobState.QUEUED, JobState.CANCELLED}
    assert TRANSITIONS[JobState.CANCELLED] == {JobState.WAITING}  # its failed parent replayed
    assert TRANSITIONS[JobState.SUCCEEDED] == set()
    assert {
        JobState.QUEUED,
        JobState.RETRYING,
        JobState.RUNNING,
        JobState.WAITING,
    } == CANCELLABLE_STATES
