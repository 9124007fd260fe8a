"""jobrelay for Django's Tasks framework (docs/django.md).

``TASKS = {"default": {"BACKEND": "jobrelay.django.JobrelayBackend", "OPTIONS": {"client":
"<client name>"}}}``: ``my_task.enqueue(...)`` writes a jobrelay job in Django's transaction
(services/jobrelay/django/backend.py); ``jobrelay consumer`` with ``DJANGO_SETTINGS_MODULE``
set runs the tasks (services/jobrelay/django/worker.py). Nothing else in jobrelay imports this
package: ``import jobrelay`` loads no Django.
"""

from __future__ import annotations

from jobrelay.django.backend import JobrelayBackend

__all__ = ["JobrelayBackend"]
