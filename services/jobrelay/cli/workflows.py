"""``jobrelay workflows show``: one workflow (any client's) as its graph, each job with its
state, read from PostgreSQL (docs/workflows.md)."""

from __future__ import annotations

import argparse
import uuid
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_group,
    print_document,
    run_with_store,
    settings_from_env,
)

if TYPE_CHECKING:
    from jobrelay.db.store import Store

EXAMPLE = "jobrelay workflows show 0190c3a2-...  (or --json for tools)"


def render_workflow(document: dict[str, Any]) -> str:
    """One line a job in the order they were submitted (``ref  state  type  id``), the refs
    it waits for under it, then the workflow's state and counts."""
    jobs = document["jobs"]
    ref_width = max(len(ref) for ref in jobs)
    lines = [f"workflow {document['id']} (on_failure {document['on_failure']})"]
    for ref, job in jobs.items():
        code = f"  ({job['last_error_code']})" if job["last_error_code"] else ""
        lines.append(f"{ref:<{ref_width}}  {job['state']:<11} {job['type']}  {job['id']}{code}")
        if job["after"]:
            lines.append(f"  after: {', '.join(job['after'])}")
    counts = "  ".join(f"{state}={n}" for state, n in sorted(document["counts"].items()))
    lines.append(f"state {document['state']}  {counts}")
    return "\n".join(lines)


def _workflow_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise CliError(f"{raw!r} is not a workflow id (a UUID)") from None


def cmd_workflows_show(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    wanted = _workflow_id(args.id)

    async def work(store: Store) -> int:
        from jobrelay.api.schemas import WorkflowViewOut
        from jobrelay.db.workflow_store import WorkflowStore

        view = await WorkflowStore(store).view(wanted)  # no client: an operator sees any
        if view is None:
            raise CliError(f"no workflow {wanted}")
        # The API's view (GET /v1/workflows/{id}), so that --json reads as the API answers.
        document = WorkflowViewOut.of(view).model_dump(mode="json")
        print_document(document, render_workflow, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    actions = add_group(commands, "workflows", "inspect workflows", EXAMPLE)
    add_command(
        actions,
        "show",
        cmd_workflows_show,
        "one workflow (any client's): its jobs as a graph, each with its state",
        EXAMPLE,
        argument="id",
        json_flag=True,
    )
