"""What a failed attempt leaves for operators: the exception's class, message and traceback.

Stored with the attempt's journal entry (``job_events.error``), shown by ``jobrelay jobs trace``
and the admin trace; the job's owner sees the class and the message, never the traceback.
Secrets are masked before anything is cut to size, so a cut never leaves half a secret.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobrelay.core.masking import Masker

MESSAGE_MAX_BYTES = 2 * 1024
TRACEBACK_MAX_BYTES = 16 * 1024


@dataclass(frozen=True)
class Failure:
    error_class: str
    message: str
    traceback: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The ``job_events.error`` document."""
        return {"class": self.error_class, "message": self.message, "traceback": self.traceback}

    def summary(self) -> str:
        return f"{self.error_class}: {self.message}" if self.message else self.error_class


def describe_failure(error: BaseException, mask: Callable[[str], str] | None = None) -> Failure:
    """The error as storable, masked text (PostgreSQL text holds no NUL, jsonb no lone
    surrogate: both are spelled out). Without ``mask``, secrets are masked by their shape
    only (tokens, URL passwords, ``password=…``)."""
    mask = mask or Masker()
    return Failure(
        error_class=class_name(type(error)),
        message=cut_head(storable(mask(_message(error))), MESSAGE_MAX_BYTES),
        traceback=cut_tail(
            storable(mask("".join(traceback.format_exception(error)))), TRACEBACK_MAX_BYTES
        )
        if error.__traceback__ is not None or error.__cause__ or error.__context__
        else None,
    )


def public_failure(document: Any) -> dict[str, Any] | None:
    """What the job's owner may see of a stored failure: no traceback."""
    if not isinstance(document, dict):
        return None
    return {"class": document.get("class"), "message": document.get("message")}


def class_name(cls: type[BaseException]) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def storable(text: str) -> str:
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


HEAD_CUT = " …[cut]"
TAIL_CUT = "…[earlier frames cut]\n"


def cut_head(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes, keeping the beginning."""
    encoded, room = _over_limit(text, limit, HEAD_CUT)
    return encoded[:room].decode("utf-8", "ignore") + HEAD_CUT if encoded else text


def cut_tail(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes, keeping the end (the raising frame and the error line)."""
    encoded, room = _over_limit(text, limit, TAIL_CUT)
    return TAIL_CUT + encoded[len(encoded) - room :].decode("utf-8", "ignore") if encoded else text


def _over_limit(text: str, limit: int, marker: str) -> tuple[bytes, int]:
    """The text's bytes and the room beside ``marker`` when it is over ``limit``; else
    ``(b"", limit)``."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return b"", limit
    return encoded, limit - len(marker.encode("utf-8"))


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a broken __str__ must not lose the failure
        return "<the exception's message could not be read>"
