"""A pure ASGI middleware that refuses bodies over the maximum size (``JOBRELAY_MAX_BODY_BYTES``)
with 413 before the app reads them; a path may have its own maximum (the batch submission's,
``JOBRELAY_MAX_BATCH_BYTES``, is larger)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrelay.api.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE


class BodySizeMiddleware:
    def __init__(
        self, app: ASGIApp, max_body_bytes: int, per_path: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.per_path = per_path or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.per_path.get(scope["path"], self.max_body_bytes)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(send, limit)
            return
        # Buffer up to the limit (bodies are small by contract), then replay to the app.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(send, limit)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, limit: int) -> None:
        body: dict[str, Any] = {
            "type": PROBLEM_TYPE_BASE + "payload_too_large",
            "title": "Request body too large",
            "status": 413,
            "code": "payload_too_large",
            "detail": f"the body limit is {limit} bytes",
        }
        encoded = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_CONTENT_TYPE.encode()),
                    (b"content-length", str(len(encoded)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": encoded})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
