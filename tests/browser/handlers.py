"""The job types of the browser tests' system (``JOBRELAY_HANDLERS``, ``HANDLERS`` below): the
built-ins, and two periodic schedules for the schedules page."""

from __future__ import annotations

from tests.support.schedules import with_builtins

HANDLERS = "tests.browser.handlers:registry"

registry = with_builtins()
registry.schedule(
    "catalog-nightly", type="catalog.export", payload={"course": "JavaScript"}, cron="0 2 * * *"
)
registry.schedule("queue-probe", type="demo.sleep", payload={"seconds": 0}, every=300)
