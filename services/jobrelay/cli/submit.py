"""``jobrelay submit``: a job through the HTTP API, with the same checks as any client."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from typing import Any

from jobrelay.cli.common import CliError, Subcommands, add_command, print_json
from jobrelay.core.durations import parse_duration

EXAMPLE = 'jobrelay submit catalog.export --payload \'{"course": "JavaScript"}\' --key k1'

MAX_FIELD_ERRORS = 10


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
    body: dict[str, Any] = {"type": args.type, "payload": payload}
    if args.max_attempts is not None:
        body["max_attempts"] = args.max_attempts
    body.update(_due_time(args))
    request = urllib.request.Request(
        args.api_url.rstrip("/") + "/v1/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
    )
    status, answer = _http(request)
    if status >= 400:
        raise CliError(
            f"{status} {answer.get('code', '')}: {answer.get('detail') or answer.get('title')}"
            + "".join(f"\n  {line}" for line in field_errors(answer))
        )
    if args.json:
        print_json(answer)
    else:
        verb = "accepted" if status == 202 else "already known"
        print(f"{verb}: job {answer['id']} ({answer['type']}) is {answer['state']}; key {key}")
    return 0


def _due_time(args: argparse.Namespace) -> dict[str, Any]:
    """``run_at`` (RFC 3339 with an offset) or ``delay_seconds`` from --run-at / --delay."""
    if args.run_at and args.delay:
        raise CliError("give --run-at or --delay, not both")
    if args.run_at:
        try:
            when = datetime.fromisoformat(args.run_at)
        except ValueError:
            raise CliError(f"--run-at {args.run_at!r} is not an RFC 3339 time") from None
        if when.utcoffset() is None:
            raise CliError("--run-at needs an offset, e.g. 2026-12-24T18:00:00Z or +01:00")
        return {"run_at": when.isoformat()}
    if args.delay:
        try:
            return {"delay_seconds": parse_duration(args.delay)}
        except ValueError as error:
            raise CliError(f"--delay: {error}") from None
    return {}


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


def _http(request: urllib.request.Request) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"{}")
        except json.JSONDecodeError:
            return error.code, {"title": error.reason}
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise CliError(f"cannot reach the API at {request.full_url}: {reason}") from None


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
        "--api-url", default=os.environ.get("JOBRELAY_API_URL", "http://127.0.0.1:8000")
    )
    submit.add_argument("--token", help="bearer token (default: $JOBRELAY_TOKEN)")
    submit.add_argument("--json", action="store_true")
