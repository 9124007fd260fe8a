"""``db/arrays.py``: lists sent as array literals. The parse back by PostgreSQL is tested in
tests/integration/test_array_literals.py; here, the text itself."""

from __future__ import annotations

import uuid

from jobrelay.db.arrays import array_literal, with_array_literals


def test_plain_elements_in_their_text_form() -> None:
    job_id = uuid.UUID(int=1)
    assert array_literal([job_id, None]) == f"{{{job_id},NULL}}"
    assert array_literal([True, False, None]) == "{t,f,NULL}"
    assert array_literal([1, 2.5, float("inf")]) == "{1,2.5,inf}"
    assert array_literal([]) == "{}"


def test_strings_are_always_quoted_and_escaped() -> None:
    assert array_literal(["NULL", "", "a,b", '{"k": "v\\\\"}']) == (
        '{"NULL","","a,b","{\\"k\\": \\"v\\\\\\\\\\"}"}'
    )


def test_other_elements_are_left_to_psycopg() -> None:
    assert array_literal([[1, 2]]) is None
    params = {"ids": [[1]], "names": ["a"], "one": 1}
    assert with_array_literals(params) == {"ids": [[1]], "names": '{"a"}', "one": 1}
