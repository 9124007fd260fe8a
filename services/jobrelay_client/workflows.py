"""The ``Workflow`` builder: a graph of jobs to submit as one (docs/workflows.md). Standard
library only: the slim client (``jobrelay_client.Workflow``) and the full package
(``jobrelay.Workflow``, re-exported by ``jobrelay/core/workflows.py``) are this one class. The
graph is checked again by the API, or by ``enqueue_workflow``, when it is submitted."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from jobrelay_client.flow import check_priority

# A ref: 1 to 100 letters, digits, "_", "-" or ".".
REF_MAX = 100
_REF = re.compile(rf"[A-Za-z0-9_.-]{{1,{REF_MAX}}}")


class OnFailure(StrEnum):
    """What becomes of the jobs that depend on one that ends quarantined (or cancelled)."""

    CANCEL_DEPENDENTS = "cancel_dependents"  # cancelled, code dependency_failed
    CONTINUE = "continue"  # they stay waiting; the rest of the workflow runs on


def is_valid_ref(ref: object) -> bool:
    return isinstance(ref, str) and _REF.fullmatch(ref) is not None


@dataclass
class Workflow:
    """A graph of jobs to submit as one (``Client.submit_workflow``, ``enqueue_workflow``)::

    flow = jobrelay.Workflow()
    exports = [flow.add("export", {"table": t}) for t in ("users", "orders")]
    archive = flow.add("zip", {}, after=exports)
    flow.add("mail", {"to": "ops@example.com"}, after=[archive])
    """

    jobs: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        type: str,
        payload: Any,
        *,
        ref: str | None = None,
        after: Iterable[str] = (),
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> str:
        """Add a job; returns its ref (``j1``, ``j2``… unless given) to name in ``after``."""
        ref = ref if ref is not None else f"j{len(self.jobs) + 1}"
        if not is_valid_ref(ref):
            raise ValueError(f"ref is 1 to {REF_MAX} letters, digits, '_', '-' or '.': {ref!r}")
        if any(job["ref"] == ref for job in self.jobs):
            raise ValueError(f"ref {ref!r} names a job of this workflow already")
        after = list(after)
        known = {job["ref"] for job in self.jobs}
        unknown = [parent for parent in after if parent not in known]
        if unknown:  # added later, it could close a cycle: the graph is built in order
            raise ValueError(f"after names {unknown[0]!r}, not a job added before {ref!r}")
        if priority is not None:
            check_priority(priority)
        job: dict[str, Any] = {"ref": ref, "type": type, "payload": payload}
        if after:
            job["after"] = after
        if priority is not None:
            job["priority"] = priority
        if max_attempts is not None:
            job["max_attempts"] = max_attempts
        self.jobs.append(job)
        return ref

    def body(self, on_failure: OnFailure | str = OnFailure.CANCEL_DEPENDENTS) -> dict[str, Any]:
        """The body of ``POST /v1/workflows``."""
        return {"jobs": [dict(job) for job in self.jobs], "on_failure": OnFailure(on_failure).value}

    def __len__(self) -> int:
        return len(self.jobs)
