"""The API's OpenAPI document as the TypeScript client's types are generated from it:
``python scripts/openapi_document.py OUT`` (``make typescript-types``).

Built from the app itself, with no job type loaded (``builtins=False``, no handler modules): the
document then describes the API, not one deployment's types, and is the same on every machine.
tests/unit/test_typescript_client.py compares it with clients/typescript/openapi.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings


def document() -> dict[str, Any]:
    """The document of an app that opens nothing (no lifespan runs to build it)."""
    settings = Settings(builtins=False, handlers="")
    return create_app(settings).openapi()


def text(document: dict[str, Any]) -> str:
    """The document as checked in: indented, keys in their order, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: openapi_document.py OUT", file=sys.stderr)
        return 2
    Path(argv[0]).write_text(text(document()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
