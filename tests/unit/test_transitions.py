"""Every SQL statement that changes ``jobs.state`` declares the transitions of the core
(``core/states.py``) it makes (its ``-- makes:`` line in ``db/sql/*.sql``, read into
``queries.STATE_WRITES``), and its literal text carries the guard rendered from each of those
transitions (tests/support/guards.py): a statement whose guard drifts from the table fails
here. What a guard lets through is checked in PostgreSQL itself
(tests/integration/test_transition_guards.py)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from jobrelay.core.states import (
    ALL_TRANSITIONS,
    CANCEL,
    CANCEL_RUNNING,
    COMPLETE,
    DEPENDENCY_FAILED,
    PARENTS_SUCCEEDED,
    QUARANTINE,
    RETRY,
    TERMINAL_STATES,
    WAKE,
    JobState,
    Lease,
)
from jobrelay.db import queries as q
from jobrelay.db.sql import STATEMENTS
from tests.support.guards import guard, guarded_by
from tests.support.transitions import CANCELLABLE_STATES, TRANSITIONS

# The transitions more than one statement makes: the dependents' moves, in every statement that
# can end a parent (the fragment dependents_of), a cancel, of one job or of a workflow's, and a
# sleeper's wake (by its child's end, in dependents_of, or into a hold, HOLD_JOB).
SHARED_TRANSITIONS = frozenset({PARENTS_SUCCEEDED, DEPENDENCY_FAILED, CANCEL, WAKE})
# FINISH_JOBS and its lean twin, the same body (the fragment finish_moves) with and without the
# workflow release: for a group with no job of a workflow and no child (db/execution_store.py).
WORKER_EXITS = {"FINISH_JOBS", "FINISH_PLAIN_JOBS"}


@pytest.mark.parametrize("name", sorted(q.STATE_WRITES))
def test_the_statement_is_guarded_by_the_guard_of_each_of_its_transitions(name: str) -> None:
    sql = getattr(q, name).text
    assert [t.name for t in q.STATE_WRITES[name] if not guarded_by(sql, t)] == []


def test_a_guard_on_other_states_than_declared_is_caught() -> None:
    narrower = dataclasses.replace(CANCEL, source=frozenset({JobState.QUEUED}))
    assert not guarded_by(q.CANCEL_JOB.text, narrower)


def test_a_statement_whose_guard_was_edited_is_caught() -> None:
    sql = q.CANCEL_JOB.text
    assert guarded_by(sql, CANCEL)
    assert not guarded_by(sql.replace("'retrying', 'waiting'", "'waiting'"), CANCEL)


def test_a_guard_written_over_two_lines_is_still_found() -> None:
    assert guarded_by(f"WHERE id = :id AND {guard(CANCEL)}".replace(" IN ", "\n    IN "), CANCEL)


# A write of ``jobs.state``: an UPDATE's ``SET state =`` (the only way statements change it).
_SETS_STATE = re.compile(r"\bSET\s+state\s*=", re.IGNORECASE)


def test_every_statement_that_sets_a_state_declares_the_transitions_it_makes() -> None:
    setting = {name.upper() for name, s in STATEMENTS.items() if _SETS_STATE.search(s.sql)}
    assert setting == set(q.STATE_WRITES)


def test_a_fenced_transition_is_guarded_by_its_token() -> None:
    for transition in ALL_TRANSITIONS:
        unfenced = dataclasses.replace(transition, fenced=False)
        if transition.fenced:
            assert guard(transition).startswith("lease_token = :lease_token AND ")
            assert guard(transition) != guard(unfenced)
        else:
            assert ":lease_token" not in guard(transition)


def test_a_lease_asked_of_a_running_job_changes_its_guard() -> None:
    running = [t for t in ALL_TRANSITIONS if JobState.RUNNING in t.source]
    for transition in running:
        others = {dataclasses.replace(transition, lease=lease) for lease in Lease} - {transition}
        assert all(guard(other) != guard(transition) for other in others)


def test_the_exits_of_a_worker_share_one_guard_so_one_statement_makes_them_all() -> None:
    exits = (COMPLETE, RETRY, QUARANTINE, CANCEL_RUNNING)
    assert len({guard(t, "a.asked_token") for t in exits}) == 1
    for name in WORKER_EXITS:
        assert set(exits) == set(q.STATE_WRITES[name]) - SHARED_TRANSITIONS


def test_every_exit_of_a_worker_from_running_is_one_statement() -> None:
    worker_exits = {"complete", "retry", "quarantine", "cancel_running"}
    makers = {
        name for name, made in q.STATE_WRITES.items() if {t.name for t in made} & worker_exits
    }
    assert makers == WORKER_EXITS
    # The lean one is the full one without its workflow release, word for word.
    answer = "SELECT id, asked_token, target, ends_as FROM moved"
    plain = q.FINISH_PLAIN_JOBS.text.removesuffix(answer).rstrip()
    assert q.FINISH_JOBS.text.startswith(plain) and q.FINISH_JOBS.text.endswith(answer)
    assert "moved_dependents" in q.FINISH_JOBS.text and "moved_dependents" not in plain


def test_every_transition_is_made_by_exactly_one_statement_but_the_shared_ones() -> None:
    made = [
        t
        for name, transitions in q.STATE_WRITES.items()
        for t in transitions
        if name != "FINISH_PLAIN_JOBS"  # FINISH_JOBS' twin (above)
    ]
    alone = [t.name for t in made if t not in SHARED_TRANSITIONS]
    assert sorted(alone) == sorted(t.name for t in ALL_TRANSITIONS if t not in SHARED_TRANSITIONS)
    assert {t.name for t in made} == {t.name for t in ALL_TRANSITIONS}
    assert all(sum(t in ts for ts in q.STATE_WRITES.values()) > 1 for t in SHARED_TRANSITIONS)


def test_every_statement_that_can_end_a_job_of_a_workflow_moves_its_dependents() -> None:
    ending = {
        name
        for name, made in q.STATE_WRITES.items()
        if any(t.target in TERMINAL_STATES for t in made)
        # a workflow's own cancel, and the finish of a group with no job of a workflow or child
        and name not in {"CANCEL_WORKFLOW_JOBS", "FINISH_PLAIN_JOBS"}
    }
    moving = {name for name, made in q.STATE_WRITES.items() if DEPENDENCY_FAILED in made}
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
        JobState.SLEEPING,  # a durable sleep, or a wait for a signal or a child
    }
    assert TRANSITIONS[JobState.SLEEPING] == {
        JobState.RUNNING,  # claimed when its wake time comes
        JobState.QUEUED,  # woken: its signal, its child's end, into a hold
        JobState.CANCELLED,
        JobState.QUARANTINED,  # attempts exhausted, delivery limit, unknown type
    }
    assert TRANSITIONS[JobState.QUARANTINED] == {JobState.QUEUED, JobState.CANCELLED}
    assert TRANSITIONS[JobState.WAITING] == {JobState.QUEUED, JobState.CANCELLED}
    assert TRANSITIONS[JobState.CANCELLED] == {JobState.WAITING}  # its failed parent replayed
    assert TRANSITIONS[JobState.SUCCEEDED] == set()
    assert {
        JobState.QUEUED,
        JobState.RETRYING,
        JobState.RUNNING,
        JobState.WAITING,
        JobState.SLEEPING,
        JobState.QUARANTINED,  # given up on: it no longer blocks its sequence
    } == CANCELLABLE_STATES
