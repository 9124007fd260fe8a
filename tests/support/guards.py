"""The guard of each transition of ``core/states.py`` rendered as SQL, for the tests that hold
the statements' literal guards to the transitions (tests/unit/test_transitions.py) and ask
PostgreSQL what a guard lets through (tests/integration/test_transition_guards.py). The
statements (services/jobrelay/db/sql/*.sql) write their guards out; these renderings are what
they must read."""

from __future__ import annotations

from jobrelay.core.states import JobState, Lease, Transition

# The token a fenced guard compares with: a parameter, or a group's column of tokens.
TOKENS = (":lease_token", "a.asked_token")

_RUNNING_WITH_LEASE = {
    Lease.ANY: f"state = '{JobState.RUNNING}'",
    Lease.LIVE: f"(state = '{JobState.RUNNING}' AND lease_until > now())",
    Lease.EXPIRED: f"(state = '{JobState.RUNNING}' AND lease_until < now())",
}


def state_in(states: frozenset[JobState]) -> str:
    listed = ", ".join(f"'{state}'" for state in JobState if state in states)
    return f"state IN ({listed})"


def guard(transition: Transition, token: str = ":lease_token") -> str:
    """The WHERE condition a statement making ``transition`` puts on the job's row (the
    columns unqualified): its source states, the lease it asks of a running job, the token
    (a parameter, or the column of a group's requests that holds each row's own token)."""
    waiting = transition.source - {JobState.RUNNING}
    parts = [state_in(waiting)] if waiting else []
    if JobState.RUNNING in transition.source:
        parts.append(_RUNNING_WITH_LEASE[transition.lease])
    condition = parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
    return f"lease_token = {token} AND {condition}" if transition.fenced else condition


def one_line(sql: str) -> str:
    """``sql`` with every run of whitespace made one space, so that a guard written over two
    lines is found as rendered."""
    return " ".join(sql.split())


def guarded_by(sql: str, transition: Transition) -> bool:
    """Whether the statement ``sql`` is guarded by ``transition``'s guard, on any token."""
    return any(guard(transition, token) in one_line(sql) for token in TOKENS)
