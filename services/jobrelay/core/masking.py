"""Masking known secrets out of every text that is stored or logged.

Known secrets are the passwords in the database and broker URLs; bearer tokens (``jr_…``),
the password of any URL and ``password=…``-style pairs are recognised by their shape. The
passwords every local setup shares (``jobrelay``, ``guest``: the defaults of ``Settings``) are
public knowledge, and masking them would blank out the product's own name in every traceback.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from jobrelay.core.settings import Settings, mask_url

MASK = "***"
# Passwords anyone can read in docs/configuration.md and compose.yaml: not secrets.
PUBLIC_DEFAULT_PASSWORDS = frozenset({"jobrelay", "guest"})
# A shorter password would mask ordinary words; URLs still have it masked by their shape.
MIN_SECRET_LENGTH = 4

_TOKEN = re.compile(r"\bjr_[A-Za-z0-9_\-]{8,}")
_PAIR_WORDS = ("pass", "pwd", "secret", "token", "key")
_PAIR = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key)(\s*[=:]\s*)(?!\*\*\*)[^\s,;&'\"]+"
)


@dataclass(frozen=True)
class Masker:
    """``masker(text)``: the text with every known secret replaced by ``***``."""

    secrets: tuple[str, ...] = ()

    def __call__(self, text: str) -> str:
        # Every log field goes through here: plain substring checks keep the common case (no
        # secret in sight) to a few scans, the regular expressions run only where they can match.
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        if "jr_" in text:
            text = _TOKEN.sub("jr_" + MASK, text)
        lowered = text.lower()
        if any(word in lowered for word in _PAIR_WORDS):
            text = _PAIR.sub(r"\1\2" + MASK, text)
        return mask_url(text) if "@" in text else text

    @classmethod
    def for_urls(cls, urls: Iterable[str]) -> Masker:
        """A masker for the passwords of ``urls`` (each may be a comma-separated list)."""
        found: set[str] = set()
        for url in urls:
            for node in url.split(","):
                found.update(_passwords(node.strip()))
        kept = (
            s for s in found if len(s) >= MIN_SECRET_LENGTH and s not in PUBLIC_DEFAULT_PASSWORDS
        )
        # Longest first, so that a secret containing another is masked whole.
        return cls(tuple(sorted(kept, key=len, reverse=True)))

    @classmethod
    def from_settings(cls, settings: Settings) -> Masker:
        masker = cls.for_urls([settings.database_url, settings.amqp_url])
        if settings.console_secret is None:
            return masker
        # The console's signing key (JOBRELAY_CONSOLE_SECRET): never printed, masked if it were.
        secrets = (settings.console_secret.get_secret_value(), *masker.secrets)
        return cls(tuple(sorted(set(secrets), key=len, reverse=True)))


def _passwords(url: str) -> set[str]:
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return set()
    if not password:
        return set()
    return {password, urllib.parse.unquote(password)}
