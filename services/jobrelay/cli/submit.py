"""``jobrelay submit``: a job through the HTTP API, with ``jobrelay.Client``; with ``--wait``,
then its end: the final view, and an exit status that says how it ended (``WAIT_EXIT``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from datetime import datetime
from typing import Any

import httpx

from jobrelay.cli.common import CliError, Subcommands, add_command, print_json
from jobrelay.cli.output import render_job
from jobrelay.client import (
    ApiError,
    Client,
    IdempotencyConflict,
    Job,
    ThrottledError,
)
from jobrelay.core.durations import parse_duration
from jobrelay.core.jobs import OnDuplicate
from jobrelay_client.models import as_json as view_json

EXAMPLE = 'jobrelay submit catalog.export --payload \'{"course": "JavaScript"}\' --key k1'

MAX_FIELD_ERRORS = 10
TIMEOUT_SECONDS = 30.0
WAIT_SECONDS = 300.0  # --wait's default --timeout

# How ``--wait`` ends (docs/submitting.md): 0 succeeded; 1 (every CLI error, usage errors too)
# not submitted or the API lost; then one status per way of not succeeding.
WAIT_EXIT = {"succeeded": 0, "quarantined": 3, "cancelled": 4}
EXIT_STILL_RUNNING = 5  # not finished within --timeout: the job goes on


class _StatusRecorder(httpx.BaseTransport):
    """The network, remembering the last answer's status: 202 made the job, 200 found it."""

    def __init__(self) -> None:
        self._network = httpx.HTTPTransport()
        self.status: int | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._network.handle_request(request)
        self.status = response.status_code
        return response

    def close(self) -> None:
        self._network.close()


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as error:
        raise CliError(
            f"--payload is not valid JSON: {error.msg} at position {error.pos}"
        ) from None
    token = args.token or os.environ.get("JOBRELAY_TOKEN")
    if not token:
        raise CliError("no token: pass --token or set JOBRELAY_TOKEN")
    key = args.key or str(uuid.uuid4())
    made_key = None if args.key else key
    run_at, delay = _due_time(args)
    wait_seconds = _wait_seconds(args)
    recorder = _StatusRecorder()
    try:
        # One try: a failure is printed at once, with the key to retry with.
        with Client(
            args.api_url, token, timeout=TIMEOUT_SECONDS, retries=0, transport=recorder
        ) as client:
            job = client.submit(
                args.type,
                payload,
                key=key,
                max_attempts=args.max_attempts,
                run_at=run_at,
                delay=delay,
                priority=args.priority,
                concurrency_key=args.concurrency_key,
                unique_key=args.unique_key,
                sequence_key=args.sequence_key,
                unique_for_seconds=args.unique_for,
                on_duplicate=args.on_duplicate,
                debounce_seconds=args.debounce,
                debounce_max_seconds=args.debounce_max,
                throttle_key=args.throttle_key,
            )
            accepted = recorder.status == 202
            if wait_seconds is not None:
                return _wait_for_end(client, job, key, accepted, wait_seconds, args)
    except ApiError as error:
        raise CliError(_refusal(error, made_key)) from None
    except (httpx.TransportError, httpx.InvalidURL) as error:
        raise CliError(
            f"cannot reach the API at {args.api_url}: {error}{_retry_hint(made_key)}"
        ) from None
    # What the client refuses to send: a malformed --key, a priority out of range, a key
    # too long, a window or a debounce of 0 seconds (one line, like every CLI error).
    except ValueError as error:
        raise CliError(str(error)) from None
    _show(job, key, accepted=accepted, as_json=args.json)
    return 0


def _wait_seconds(args: argparse.Namespace) -> float | None:
    """How long ``--wait`` waits (None: no ``--wait``); ``--timeout`` alone is a mistake."""
    if not args.wait:
        if args.timeout is not None:
            raise CliError("--timeout goes with --wait")
        return None
    seconds = WAIT_SECONDS if args.timeout is None else args.timeout
    if not seconds > 0:  # NaN too
        raise CliError(f"--timeout must be more than 0 seconds, not {args.timeout}")
    return float(seconds)


def _wait_for_end(
    client: Client, job: Job, key: str, accepted: bool, seconds: float, args: argparse.Namespace
) -> int:
    """After the submit line (text only), the job's final view and the status of its end. The
    wait reads the job as the API's ``?wait=`` wakes it; a lost API is a CLI error naming the
    job, which goes on (``jobrelay jobs show`` finds it)."""
    if not args.json:
        _show(job, key, accepted=accepted, as_json=False)
    try:
        final = client.wait(job.id, timeout=seconds)
    except TimeoutError:
        final = client.get(job.id)
        _print_view(final, args.json)
        print(
            f"job {job.id} is still {final.state} after {seconds:g} s; it goes on",
            file=sys.stderr,
        )
        return EXIT_STILL_RUNNING
    except (ApiError, httpx.TransportError) as error:
        raise CliError(f"job {job.id} was submitted, but waiting for it failed: {error}") from None
    _print_view(final, args.json)
    return WAIT_EXIT[final.state]


def _print_view(job: Job, as_json: bool) -> None:
    """The job view as ``jobrelay jobs show`` prints it (``--json``: the API's document)."""
    view = view_json(job)
    if as_json:
        print_json(view)
    else:
        print(render_job(view))


def _show(job: Job, key: str, *, accepted: bool, as_json: bool) -> None:
    if as_json:
        print_json(view_json(job))
    else:
        if job.deduplicated:
            print(
                f"deduplicated: job {job.id} ({job.type}) is {job.state} with unique key "
                f"{job.unique_key}; no job made, key {key} not kept"
            )
            return
        if job.debounced:
            print(
                f"debounced: job {job.id} ({job.type}) took the payload and runs from "
                f"{job.available_at.isoformat()}; no job made, key {key} not kept"
            )
            return
        verb = "accepted" if accepted else "already known"
        print(f"{verb}: job {job.id} ({job.type}) is {job.state}; key {key}")


def _refusal(error: ApiError, made_key: str | None) -> str:
    """The API's answer in a line, then its field errors: a conflict names the job that has
    the key (a refused duplicate's detail names its job); a throttle says when one more is
    taken; a failure worth retrying names the key this command made up."""
    line = f"{error.status} {error.code}: {error.detail}"
    if isinstance(error, IdempotencyConflict) and error.job_id is not None:
        line += f" (job {error.job_id} has this key)"
    if isinstance(error, ThrottledError) and error.retry_after is not None:
        line += f"; one more is taken in {error.retry_after:g} s"
    if error.status == 429 or error.status >= 500:
        line += _retry_hint(made_key)
    return line + "".join(f"\n  {item}" for item in field_errors(error.problem))


def _retry_hint(made_key: str | None) -> str:
    """For a submission that may be worth sending again: the key this command made up."""
    return f"; the key was {made_key}: retry with --key {made_key}" if made_key else ""


def _due_time(args: argparse.Namespace) -> tuple[datetime | None, float | None]:
    """``run_at`` (RFC 3339 with an offset) or the delay in seconds, from --run-at / --delay."""
    if args.run_at and args.delay:
        raise CliError("give --run-at or --delay, not both")
    if args.run_at:
        try:
            when = datetime.fromisoformat(args.run_at)
        except ValueError:
            raise CliError(f"--run-at {args.run_at!r} is not an RFC 3339 time") from None
        if when.utcoffset() is None:
            raise CliError("--run-at needs an offset, e.g. 2026-12-24T18:00:00Z or +01:00")
        return when, None
    if args.delay:
        try:
            return None, parse_duration(args.delay)
        except ValueError as error:
            raise CliError(f"--delay: {error}") from None
    return None, None


def field_errors(problem: dict[str, Any]) -> list[str]:
    """``where: what`` for each field error of a problem (``payload.seconds: Field required``):
    the request's own fields from a ``validation_error``, the payload's from an
    ``invalid_payload`` (whose locations are inside the payload)."""
    errors = problem.get("errors")
    if not isinstance(errors, list):
        return []
    lines: list[str] = []
    for item in errors:
        if not isinstance(item, dict):
            continue
        loc = [str(part) for part in item.get("loc") or []]
        if problem.get("code") == "invalid_payload":
            loc = ["payload", *loc]
        elif loc[:1] == ["body"]:
            loc = loc[1:]
        lines.append(f"{'.'.join(loc) or 'body'}: {item.get('msg', 'invalid')}")
    if len(lines) > MAX_FIELD_ERRORS:
        more = len(lines) - MAX_FIELD_ERRORS
        lines = [*lines[:MAX_FIELD_ERRORS], f"... and {more} more"]
    return lines


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    submit = add_command(commands, "submit", cmd_submit, "submit a job through the API", EXAMPLE)
    submit.add_argument("type")
    submit.add_argument("--payload", default="{}", help="the payload as JSON")
    submit.add_argument("--key", help="Idempotency-Key (default: a new UUID)")
    submit.add_argument("--max-attempts", type=int, default=None)
    submit.add_argument(
        "--run-at", metavar="TIME", help="not before this time (RFC 3339 with an offset)"
    )
    submit.add_argument("--delay", metavar="DURATION", help="not before this long, e.g. 90s, 10m")
    submit.add_argument(
        "--priority", type=int, help="-100 to 100, higher runs first (default: the type's)"
    )
    submit.add_argument(
        "--concurrency-key", metavar="KEY", help="what a per-key limit counts the job under"
    )
    submit.add_argument(
        "--unique-key",
        metavar="KEY",
        help="no new job while one of the type with this key is queued, running or retrying",
    )
    _policy_arguments(submit)
    submit.add_argument(
        "--api-url", default=os.environ.get("JOBRELAY_API_URL", "http://127.0.0.1:8000")
    )
    submit.add_argument("--token", help="bearer token (default: $JOBRELAY_TOKEN)")
    submit.add_argument("--json", action="store_true")
    submit.add_argument(
        "--wait",
        action="store_true",
        help="then wait for the job to finish and print it; exit 0 succeeded, 3 quarantined, "
        f"4 cancelled, {EXIT_STILL_RUNNING} not finished within --timeout",
    )
    submit.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long --wait waits (default {WAIT_SECONDS:g})",
    )


def _policy_arguments(submit: argparse.ArgumentParser) -> None:
    """The order and submission policies (docs/flow-control.md), the API's fields."""
    submit.add_argument(
        "--sequence-key",
        metavar="KEY",
        help="run after the jobs of this key accepted before it, one at a time",
    )
    submit.add_argument(
        "--unique-for",
        type=float,
        metavar="SECONDS",
        help="with --unique-key: a job of the key that ended this recently answers too",
    )
    submit.add_argument(
        "--on-duplicate",
        choices=[choice.value for choice in OnDuplicate],
        help="with --unique-key: what a duplicate gets (default return_existing)",
    )
    submit.add_argument(
        "--debounce",
        type=float,
        metavar="SECONDS",
        help="with --unique-key: the key's queued job takes this payload, runs this long after",
    )
    submit.add_argument(
        "--debounce-max",
        type=float,
        metavar="SECONDS",
        help="with --debounce: never later than this after the first submission",
    )
    submit.add_argument(
        "--throttle-key", metavar="KEY", help="what the type's throttle counts the job under"
    )
