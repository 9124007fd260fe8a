"""What each transition's guard (tests/support/guards.py, from ``core/states.py``; the statements
of ``db/sql/*.sql`` carry it literally, tests/unit/test_transitions.py) lets
through, asked of PostgreSQL itself: rows in every state, under a live and an expired lease,
held by the asking token or another, and the rows each guard selects are exactly those its
transition allows (``Transition.allows``, and the token when it is fenced)."""

from __future__ import annotations

import itertools
import uuid

import pytest
from sqlalchemy import text

from jobrelay.core.states import ALL_TRANSITIONS, JobState, Transition
from jobrelay.db.store import Store
from tests.support.guards import guard

OURS, OTHER = uuid.uuid4(), uuid.uuid4()
ROWS = [
    (state, expired, token)
    for state, expired, token in itertools.product(JobState, (False, True), (OURS, OTHER))
]


def _allowed(transition: Transition, state: JobState, expired: bool, token: uuid.UUID) -> bool:
    if transition.fenced and token != OURS:
        return False
    return transition.allows(state, lease_expired=expired)


@pytest.mark.parametrize("transition", ALL_TRANSITIONS, ids=lambda t: t.name)
async def test_the_guard_selects_exactly_the_rows_its_transition_allows(
    store: Store, transition: Transition
) -> None:
    async with store.transaction() as connection:
        await connection.execute(
            text(
                "CREATE TEMP TABLE guarded (n int, state text, lease_token uuid,"
                " lease_until timestamptz) ON COMMIT DROP"
            )
        )
        for n, (state, expired, token) in enumerate(ROWS):
            await connection.execute(
                text(
                    "INSERT INTO guarded VALUES (:n, :state, :token, now() + make_interval("
                    "secs => CASE WHEN :expired THEN -60 ELSE 60 END))"
                ),
                {"n": n, "state": state.value, "token": token, "expired": expired},
            )
        selected = (
            await connection.execute(
                text(f"SELECT n FROM guarded WHERE {guard(transition)}"),
                {"lease_token": OURS},
            )
        ).scalars()
        moved = {ROWS[n] for n in selected}
    expected = {row for row in ROWS if _allowed(transition, *row)}
    assert moved == expected
    assert expected  # every transition lets some row through
