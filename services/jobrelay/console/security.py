"""What the console signs and checks, as pure functions: the session cookie, the CSRF token of
its forms, the flash message shown once after an action, and where a sign-in may send the
browser next. The key and the clock are passed in (docs/console.md).

Every value is an HMAC-SHA256 over a purpose and a message (``purpose:message``), so a value
signed for one purpose is never accepted for another: a flash cookie is no session, and a CSRF
token is no cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import urllib.parse
import uuid
from dataclasses import dataclass

SESSION_VERSION = "s1"
# A cookie longer than this is not one of ours: refused before any parsing.
MAX_SIGNED_LENGTH = 4096
NONCE_BYTES = 16
FLASH_SECONDS = 60
FLASH_MAX_CHARS = 500
FLASH_KINDS = ("ok", "error")
DEFAULT_NEXT = "/ui/"
CONSOLE_ROOT = "/ui"


@dataclass(frozen=True)
class Session:
    """A signed-in operator: which client, until when (Unix seconds), and a random nonce that
    the session's CSRF token derives from. The token used to sign in is never part of it."""

    client_id: uuid.UUID
    expires_at: int
    nonce: str

    @classmethod
    def new(cls, client_id: uuid.UUID, *, now: float, lifetime_seconds: int) -> Session:
        return cls(client_id, int(now) + lifetime_seconds, secrets.token_urlsafe(NONCE_BYTES))


@dataclass(frozen=True)
class Flash:
    """A message about the last action, shown once on the next page."""

    kind: str  # ok | error
    text: str


def mac(key: bytes, purpose: str, message: str) -> str:
    """HMAC-SHA256 of ``purpose:message`` under ``key``, URL-safe base64 without padding."""
    digest = hmac.new(key, f"{purpose}:{message}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _signed(key: bytes, purpose: str, body: str) -> str:
    return f"{body}.{mac(key, purpose, body)}"


def _verified(key: bytes, purpose: str, value: str | None) -> str | None:
    """The body of a value ``_signed`` made for ``purpose``, or None."""
    if not value or len(value) > MAX_SIGNED_LENGTH:
        return None
    body, _, sent = value.rpartition(".")
    expected = mac(key, purpose, body)
    if not body or not hmac.compare_digest(sent.encode(), expected.encode()):
        return None
    return body


# --- the session cookie --------------------------------------------------------------------


def sign_session(key: bytes, session: Session) -> str:
    body = f"{SESSION_VERSION}.{session.client_id.hex}.{session.expires_at}.{session.nonce}"
    return _signed(key, "session", body)


def read_session(key: bytes, value: str | None, *, now: float) -> Session | None:
    """The session a cookie holds, or None when it is missing, forged, altered or expired."""
    body = _verified(key, "session", value)
    if body is None:
        return None
    parts = body.split(".")
    if len(parts) != 4 or parts[0] != SESSION_VERSION or not parts[3]:
        return None
    try:
        client_id = uuid.UUID(hex=parts[1])
        expires_at = int(parts[2])
    except ValueError:
        return None
    if expires_at <= now:
        return None
    return Session(client_id, expires_at, parts[3])


# --- CSRF ------------------------------------------------------------------------------------


def csrf_token(key: bytes, session: Session) -> str:
    """The hidden field of every form that changes something: HMAC(key, "csrf:" + nonce). It
    changes with every sign-in, and a page of another site can neither read nor make it."""
    return mac(key, "csrf", session.nonce)


def csrf_matches(key: bytes, session: Session, sent: str | None) -> bool:
    if not sent:
        return False
    return hmac.compare_digest(sent.encode(), csrf_token(key, session).encode())


# --- the flash message -------------------------------------------------------------------------


def sign_flash(key: bytes, flash: Flash, *, now: float) -> str:
    text = base64.urlsafe_b64encode(flash.text[:FLASH_MAX_CHARS].encode()).decode()
    return _signed(key, "flash", f"{flash.kind}.{int(now) + FLASH_SECONDS}.{text}")


def read_flash(key: bytes, value: str | None, *, now: float) -> Flash | None:
    body = _verified(key, "flash", value)
    if body is None:
        return None
    kind, _, rest = body.partition(".")
    expires, _, text = rest.partition(".")
    try:
        if kind not in FLASH_KINDS or int(expires) <= now:
            return None
        return Flash(kind, base64.urlsafe_b64decode(text.encode()).decode())
    except (ValueError, UnicodeDecodeError):
        return None


# --- where to go after signing in --------------------------------------------------------------


def safe_next(target: str | None) -> str:
    """``target`` when it is a path of the console on this site (``/ui``, ``/ui/...``, with a
    query), else the overview: a sign-in link can never send the browser to another site
    (``//evil.example``, ``https://…``, ``/\\evil``) or, through ``..``, out of the console."""
    if not target or len(target) > 2000 or not target.startswith(CONSOLE_ROOT):
        return DEFAULT_NEXT
    if any(ord(char) < 0x21 or char in "\\\x7f" for char in target):
        return DEFAULT_NEXT
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc or parts.fragment:
        return DEFAULT_NEXT
    if parts.path != CONSOLE_ROOT and not parts.path.startswith(CONSOLE_ROOT + "/"):
        return DEFAULT_NEXT
    segments = urllib.parse.unquote(parts.path).split("/")
    if any(segment in (".", "..") for segment in segments) or "//" in parts.path:
        return DEFAULT_NEXT
    return target
