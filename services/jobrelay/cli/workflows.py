"""``jobrelay workflows list | show``: the workflows of every client, newest first, and one
workflow (any client's) as its graph, each job with its state, read from PostgreSQL
(docs/workflows.md)."""

from __future__ import annotations

import argparse
import uuid
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    MAX_LIST_LIMIT,
    CliError,
    Subcommands,
    add_command,
    add_group,
    list_page,
    print_document,
    run_with_store,
    settings_from_env,
)
from jobrelay.core.workflows import WorkflowState, WorkflowSummary

if TYPE_CHECKING:
    from jobrelay.db.store import Store

EXAMPLE = "jobrelay workflows show 0190c3a2-...  (or --json for tools)"
LIST_EXAMPLE = "jobrelay workflows list --state failed --client shop --limit 20"


def listed_workflow(workflow: WorkflowSummary, client: str) -> dict[str, Any]:
    return {
        "id": str(workflow.id),
        "state": workflow.state.value,
        "client": client,
        "on_failure": workflow.on_failure.value,
        "jobs": workflow.jobs,
        "counts": dict(sorted(workflow.counts.items())),
        "created_at": workflow.created_at.isoformat(),
        "cancelled_at": workflow.cancelled_at.isoformat() if workflow.cancelled_at else None,
    }


def render_workflow_listing(listing: dict[str, Any]) -> str:
    """One line a workflow (id, state, client, jobs by state, created at), then the next page."""
    lines = []
    for workflow in listing["workflows"]:
        counts = " ".join(f"{state}={n}" for state, n in workflow["counts"].items())
        lines.append(
            f"{workflow['id']}  {workflow['state']:<9} {workflow['client']:<16} "
            f"jobs {workflow['jobs']} ({counts})  created {workflow['created_at']}"
        )
    if not lines:
        lines.append("no workflow")
    if listing["next_cursor"]:
        lines.append(f"more: add --cursor {listing['next_cursor']}")
    return "\n".join(lines)


def cmd_workflows_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    page = list_page(args)

    async def work(store: Store) -> int:
        from jobrelay.db.client_store import ClientStore
        from jobrelay.db.workflow_store import WorkflowStore

        clients = await ClientStore(store).list_clients()
        names = {client.id: client.name for client in clients}
        client_id = None
        if args.client is not None:
            client_id = next((c.id for c in clients if c.name == args.client), None)
            if client_id is None:
                raise CliError(f"no client named {args.client!r} (see: jobrelay clients list)")
        workflows = await WorkflowStore(store).list_workflows(
            client_id=client_id,
            limit=page.limit,
            after=page.after,
            state=None if args.state is None else WorkflowState(args.state),
        )
        listing = {
            "workflows": [listed_workflow(w, names.get(w.client_id, "?")) for w in workflows],
            "next_cursor": page.next_cursor(workflows),
        }
        print_document(listing, render_workflow_listing, as_json=args.json)
        return 0

    return run_with_store(settings, work)


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
    listing = add_command(
        actions,
        "list",
        cmd_workflows_list,
        "the workflows of every client, newest first, one a line",
        LIST_EXAMPLE,
        json_flag=True,
    )
    listing.add_argument("--state", choices=[state.value for state in WorkflowState])
    listing.add_argument("--client", metavar="NAME", help="only this client's workflows")
    listing.add_argument(
        "--limit",
        type=int,
        default=50,
        help=f"workflows on a page, 1 to {MAX_LIST_LIMIT} (default 50)",
    )
    listing.add_argument("--cursor", help="the next page, as the previous one printed it")
    add_command(
        actions,
        "show",
        cmd_workflows_show,
        "one workflow (any client's): its jobs as a graph, each with its state",
        EXAMPLE,
        argument="id",
        json_flag=True,
    )
