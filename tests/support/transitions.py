"""The moves between states that the transitions of ``core/states.py`` allow, for the tests
that read them (the services never ask: every statement is guarded on its own transitions)."""

from __future__ import annotations

from jobrelay.core.states import ALL_TRANSITIONS, JobState

# Every allowed move between two states, derived from the transitions.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    state: frozenset(
        t.target for t in ALL_TRANSITIONS if state in t.source and t.target is not None
    )
    for state in JobState
}

# What a client may cancel: `queued` and `retrying` at once, `running` by a request its worker
# carries out (`POST /v1/jobs/{id}/cancel`).
CANCELLABLE_STATES: frozenset[JobState] = frozenset(
    source for source, targets in TRANSITIONS.items() if JobState.CANCELLED in targets
)


def can_transition(source: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[source]
