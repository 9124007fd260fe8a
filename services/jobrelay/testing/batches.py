"""``run_batch`` / ``run_batch_async``: one call of a batch handler (docs/batch-handlers.md) as a
consumer makes it, and each job's ``Verdict``, decided by the consumer's own code
(``consumer/batches.py``'s ``call_batch``, ``core/jobs.py::decide_outcome``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any, overload

from pydantic import BaseModel

from jobrelay.consumer.batches import batch_context, call_batch
from jobrelay.core.batches import BatchJob
from jobrelay.core.masking import Masker
from jobrelay.core.registry import JobContext, JobDefinition, Registry
from jobrelay.core.retry import RetryPolicy
from jobrelay.testing.verdicts import (
    Target,
    Verdict,
    attempt_context,
    checked_payload,
    decided,
    outside_a_loop,
    target_of,
)


@overload
def run_batch(
    target: JobDefinition[Any, Any, Any],
    payloads: Sequence[BaseModel | dict[str, Any]],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> list[Verdict]: ...


@overload
def run_batch(
    target: Registry,
    job_type: str,
    payloads: Sequence[BaseModel | dict[str, Any]],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> list[Verdict]: ...


def run_batch(
    target: Target,
    *args: Any,
    attempt: int | None = None,
    max_attempts: int | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> list[Verdict]:
    """Call a batch handler once with ``payloads`` as a consumer would, and return each job's
    ``Verdict``, in the payloads' order: ``run_batch(send, [mail, ...])`` for a definition,
    ``run_batch(registry, "mail.send", [...])`` for a type of a registry. For synchronous
    tests; in async code ``await run_batch_async``.

    Each payload is checked against the type's model as ``run_job`` checks it (one that does
    not match is that job's ``invalid_payload`` quarantine, and is left out of the call); the
    type's timeout applies to the whole call. Every job is attempt ``attempt`` (by default 1)
    of ``max_attempts`` (by default the type's, else 3). One call of all the payloads: the kit
    does not split them by ``batch_key`` (a consumer calls each key's jobs apart)."""
    outside_a_loop("run_batch", "run_batch_async")
    return asyncio.run(_run(target, args, attempt, max_attempts, policy or RetryPolicy(), rng))


async def run_batch_async(
    target: Target,
    *args: Any,
    attempt: int | None = None,
    max_attempts: int | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> list[Verdict]:
    """``run_batch`` in a running event loop."""
    return await _run(target, args, attempt, max_attempts, policy or RetryPolicy(), rng)


async def _run(
    target: Target,
    args: tuple[Any, ...],
    attempt: int | None,
    max_attempts: int | None,
    policy: RetryPolicy,
    rng: random.Random | None,
) -> list[Verdict]:
    registry, name, payloads = target_of(target, args, "run_batch")
    job_type = registry.get(name)  # UnknownJobType: a test's mistake, not a verdict
    if job_type.batch is None:
        raise TypeError(f"job type {name!r} takes one job at a time: run it with run_job")
    if isinstance(payloads, BaseModel | dict | str) or not isinstance(payloads, Sequence):
        raise TypeError("run_batch takes a list of payloads")
    if not 1 <= len(payloads) <= job_type.batch.size:
        raise ValueError(
            f"a batch of {name!r} holds 1 to {job_type.batch.size} jobs, not {len(payloads)}"
        )
    mask = Masker()
    contexts = [attempt_context(job_type, registry, None, attempt, max_attempts) for _ in payloads]
    verdicts: list[Verdict | None] = []
    called: list[tuple[int, JobContext, BaseModel]] = []
    for context, payload in zip(contexts, payloads, strict=True):
        model = checked_payload(registry, job_type, payload, context, mask)
        if isinstance(model, Verdict):
            verdicts.append(model)
        else:
            called.append((len(verdicts), context, model))
            verdicts.append(None)
    if called:
        jobs = [BatchJob(c.job_id, c.attempt, c.max_attempts) for _, c, _ in called]
        call = batch_context(job_type, jobs, contexts[0].results_dir)
        runs = await call_batch(job_type, call, [model for _, _, model in called])
        for (index, job_context, _), run in zip(called, runs, strict=True):
            verdicts[index] = decided(run, job_context, policy, rng, mask)
    return [verdict for verdict in verdicts if verdict is not None]
