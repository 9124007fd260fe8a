"""The jobrelay API from Python: the client of the slim package ``jobrelay_client``
(``pip install jobrelay-client``; its docstring says what each call does), re-exported, so
that ``jobrelay.Client`` and ``from jobrelay.client import ...`` keep working. One
implementation: nothing is defined here."""

from jobrelay_client.aio import AsyncClient
from jobrelay_client.errors import (
    ApiError,
    DuplicateJobError,
    IdempotencyConflict,
    JobFinished,
    ThrottledError,
)
from jobrelay_client.models import (
    Job,
    JobLinks,
    Progress,
    Signal,
    Step,
    WorkflowJob,
    WorkflowView,
)
from jobrelay_client.sync import Client

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "DuplicateJobError",
    "IdempotencyConflict",
    "Job",
    "JobFinished",
    "JobLinks",
    "Progress",
    "Signal",
    "Step",
    "ThrottledError",
    "WorkflowJob",
    "WorkflowView",
]
