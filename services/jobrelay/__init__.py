"""jobrelay: durable background jobs on a transactional outbox, PostgreSQL and RabbitMQ.

What a handler author needs is importable from here::

    from jobrelay import JobContext, PermanentError, Registry, TransientError
"""

from jobrelay.core.errors import PermanentError, TransientError
from jobrelay.core.registry import JobContext, Registry

__all__ = ["JobContext", "PermanentError", "Registry", "TransientError"]
