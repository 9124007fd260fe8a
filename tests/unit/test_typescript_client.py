"""The TypeScript client's checked-in types are the API's (issue 43).

clients/typescript/openapi.json is the document the app builds today
(scripts/openapi_document.py), so an API change not carried into the client's types fails here.
`make typescript-types` writes the document and generates src/schema.d.ts from it;
`make test-typescript` checks that src/schema.d.ts is what openapi-typescript makes of this
document and that the client compiles against it.
"""

from __future__ import annotations

from pathlib import Path

from scripts.openapi_document import document, text

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"


def test_the_checked_in_document_is_the_apis() -> None:
    checked_in = (CLIENT / "openapi.json").read_text(encoding="utf-8")
    assert checked_in == text(document()), (
        "clients/typescript/openapi.json differs from the API's document: run make typescript-types"
    )
