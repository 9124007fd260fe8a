"""The accept of a submission under order and submission policies (docs/flow-control.md): a
sequence, a deduplication window, a debounce, a reject of duplicates, a throttle.

Like ``accept_steps`` (``db/accept.py``) it is a generator of statements, driven on one
connection inside one transaction (``Store.accept_job``'s, or the caller's for
``jobrelay.enqueue``): the statements after the advisory locks of its keys
(``TAKE_POLICY_LOCKS``) see everything the accepts of the same keys before it committed. In
order:

1. the key's job, when the idempotency key was used (a retry is never throttled or refused;
   a submission with a sequence alone goes straight to the insert, which finds a used key);
2. the job that holds its unique key (live, or ended within its window): a debounce moves that
   job when it has not started (``debounced``); else the submission is answered by it
   (``deduplicated``, ``rejected`` with ``on_duplicate: reject``) unless it debounces, in which
   case the started job hands its key to the new one;
3. the throttle: over it, ``Throttled`` before anything is written;
4. the insert, with the sequence's place (ACCEPT_POLICED_JOB), or the plain accept's rules when
   it makes nothing.

A plain submission never comes here: its accept is ``accept_steps`` alone.
"""

from __future__ import annotations

import uuid
from typing import Any

from jobrelay.core.errors import Throttled
from jobrelay.core.flow import Throttle
from jobrelay.core.idempotency import Submission
from jobrelay.core.jobs import Flow, OnDuplicate
from jobrelay.db import queries as q
from jobrelay.db.accept import AcceptResult, Step, Steps, accept_steps, held_by_row, insert_params
from jobrelay.db.rows import job_from_row


def is_policed(submission: Submission, throttle: Throttle | None) -> bool:
    """Whether the accept of ``submission`` of a type throttled by ``throttle`` (None: not)
    runs the policies; a plain one does not."""
    return throttle is not None or submission.request.job_flow.is_policed


def policy_lock_keys(
    client_id: uuid.UUID, job_type: str, flow: Flow, throttle: Throttle | None
) -> list[str]:
    """The advisory locks the accept takes, in this order (RELEASE_SEQUENCES takes the
    sequence's alone): the throttle's key, the unique key's, the sequence's."""
    keys = []
    if throttle is not None:
        keys.append(f"throttle\x1f{job_type}\x1f{flow.throttle_key or ''}")
    if flow.unique_key is not None:
        keys.append(f"unique\x1f{client_id}\x1f{job_type}\x1f{flow.unique_key}")
    if flow.sequence_key is not None:
        keys.append(sequence_lock_key(client_id, flow.sequence_key))
    return keys


def sequence_lock_key(client_id: uuid.UUID, sequence_key: str) -> str:
    """The advisory lock of a client's sequence: its accepts and its releases take it."""
    return f"sequence\x1f{client_id}\x1f{sequence_key}"


def policed_accept_steps(
    client_id: uuid.UUID, submission: Submission, throttle: Throttle | None
) -> Steps[AcceptResult]:
    """The statements of a policed accept (see the module's documentation), in one
    transaction; ``Throttled`` when the type's throttle refuses it (nothing written)."""
    request, flow = submission.request, submission.request.job_flow
    keys = policy_lock_keys(client_id, request.type, flow, throttle)
    yield (q.TAKE_POLICY_LOCKS, {"keys": keys})
    if flow.unique_key is None and throttle is None:
        # A sequence alone: nothing to answer before the insert, whose conflict on a used key
        # leads to the read of its job (a retry only spends a number of the sequence's order).
        return (yield from accept_steps(client_id, submission, insert=_insert_step))
    held = yield (
        q.JOB_BY_KEY,
        {"client_id": client_id, "idempotency_key": request.idempotency_key},
    )
    if held:
        return held_by_row(held[0], submission.fingerprint)
    answered = yield from _unique_key_answer(client_id, submission)
    if answered is not None:
        return answered
    if throttle is not None:
        yield from _take_throttle(request.type, flow, throttle)
    # The insert, with the sequence's place; when it makes nothing (a concurrent plain accept
    # took its key or unique key meanwhile), the plain rules.
    return (yield from accept_steps(client_id, submission, insert=_insert_step))


def _unique_key_answer(client_id: uuid.UUID, submission: Submission) -> Steps[AcceptResult | None]:
    """The answer of the job that holds the submission's unique key, when one does and the
    submission makes no job; None: it goes on to the insert (after a hand-over of the key by
    a started job, for a debounce)."""
    request, flow = submission.request, submission.request.job_flow
    if flow.unique_key is None:
        return None
    holders = yield (
        q.UNIQUE_KEY_HOLDER,
        {
            "client_id": client_id,
            "type": request.type,
            "unique_key": flow.unique_key,
            "window_seconds": flow.unique_for_seconds,
        },
    )
    if not holders:
        return None
    holder = holders[0]
    live = holder.finished_at is None
    if flow.debounce_seconds is not None and live:
        moved = yield (
            q.DEBOUNCE_JOB,
            {
                "id": holder.id,
                "payload": submission.payload_json,
                "debounce_seconds": flow.debounce_seconds,
                "max_seconds": flow.debounce_max_seconds,
            },
        )
        if moved:
            job = job_from_row(moved[0])
            return AcceptResult(job=job, created=False, conflict=False, debounced=True)
        yield (q.HAND_OVER_UNIQUE_KEY, {"id": holder.id})
        return None
    return AcceptResult(
        job=job_from_row(holder),
        created=False,
        conflict=False,
        deduplicated=True,
        rejected=flow.on_duplicate is OnDuplicate.REJECT,
    )


def _take_throttle(job_type: str, flow: Flow, throttle: Throttle) -> Steps[None]:
    """Count the submission against its type's throttle; ``Throttled`` over it."""
    rows = yield (
        q.TAKE_THROTTLE,
        {
            "type": job_type,
            "key": flow.throttle_key or "",
            "count": throttle.count,
            "period_seconds": throttle.period_seconds,
        },
    )
    row = rows[0]
    if not row.taken:
        in_force = Throttle(row.count, row.period_seconds)
        raise Throttled(max(float(row.retry_after or 0.0), 0.0), str(in_force))


def _insert_step(job_id: uuid.UUID, client_id: uuid.UUID, submission: Submission) -> Step:
    """ACCEPT_POLICED_JOB: ACCEPT_JOB's row with its sequence key, and a debounce's start."""
    flow = submission.request.job_flow
    params: dict[str, Any] = insert_params(job_id, client_id, submission)
    params["sequence_key"] = flow.sequence_key
    if flow.debounce_seconds is not None:  # the first of a debounce starts after its wait
        params["delay_seconds"] = flow.debounce_seconds
    return (q.ACCEPT_POLICED_JOB, params)
