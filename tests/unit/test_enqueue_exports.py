"""``jobrelay.enqueue`` is exported lazily, and stays the function whatever was imported first."""

from __future__ import annotations

import subprocess
import sys

import jobrelay
from jobrelay import transactional


def test_importing_jobrelay_does_not_import_the_enqueue_or_its_drivers() -> None:
    code = (
        "import sys, jobrelay\n"
        "assert 'jobrelay.transactional' not in sys.modules\n"
        "assert 'sqlalchemy' not in sys.modules and 'psycopg' not in sys.modules\n"
        "jobrelay.enqueue\n"
        "assert 'jobrelay.transactional' in sys.modules\n"
        # The HTTP client (httpx) is loaded only when a conflict is raised.
        "assert 'httpx' not in sys.modules, 'httpx imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_enqueue_is_the_function_even_after_its_module_was_imported() -> None:
    code = (
        "import jobrelay.transactional, jobrelay\n"
        "assert jobrelay.enqueue is jobrelay.transactional.enqueue, jobrelay.enqueue\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


ENQUEUE_NAMES = {
    "enqueue",
    "enqueue_async",
    "enqueue_workflow",
    "enqueue_workflow_async",
    "UnknownClient",
    "Workflow",
}


def test_the_enqueue_names_are_exported_from_the_top() -> None:
    assert set(dir(jobrelay)) >= ENQUEUE_NAMES
    assert set(jobrelay.__all__) >= ENQUEUE_NAMES
    assert jobrelay.enqueue is transactional.enqueue
    assert jobrelay.enqueue_async is transactional.enqueue_async
    assert jobrelay.enqueue_workflow is transactional.enqueue_workflow
    assert jobrelay.enqueue_workflow_async is transactional.enqueue_workflow_async
    assert jobrelay.Workflow is transactional.Workflow
    assert issubclass(jobrelay.UnknownClient, ValueError)


def test_the_workflow_builder_is_importable_without_the_enqueue_or_the_client() -> None:
    code = (
        "import sys\n"
        "from jobrelay import Workflow\n"
        "Workflow().add('demo.sleep', {})\n"
        "assert 'jobrelay.transactional' not in sys.modules\n"
        "assert 'httpx' not in sys.modules and 'psycopg' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
