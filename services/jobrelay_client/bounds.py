"""What one submission may ask for, stated once: the API's schemas (``api/schemas.py``),
``jobrelay.enqueue`` (``transactional.py``), the schedules (``core/schedules.py``), the
settings (``JOBRELAY_MAX_ATTEMPTS``, ``core/settings.py``) and the client, which checks a
submission before sending it, all check against these. Here, in the slim client's package
(standard library only), so that the client and the server read one copy; the server's code
imports them through ``jobrelay.core.bounds``."""

from __future__ import annotations

# An idempotency key: 1 to this many visible ASCII characters (core/jobs.py checks them).
IDEMPOTENCY_KEY_MAX = 200
# A job type's name: 1 to this many characters.
TYPE_NAME_MAX = 200
# A submission's max_attempts, a schedule's and JOBRELAY_MAX_ATTEMPTS: 1 to this.
MAX_ATTEMPTS_MAX = 100
# JOBRELAY_MAX_ATTEMPTS when unset; what jobrelay.enqueue uses for a type without its own limit.
DEFAULT_MAX_ATTEMPTS = 3
# delay_seconds: 0 to a year.
MAX_DELAY_SECONDS = 365 * 86400
# A job's priority (higher runs first; docs/flow-control.md): from this to PRIORITY_MAX.
PRIORITY_MIN = -100
PRIORITY_MAX = 100
# A concurrency key or a unique key: at most this many characters.
FLOW_KEY_MAX = 200
# A signal (docs/durable-execution.md): its name 1 to this many characters (a step's name is
# derived from it), its JSON value at most this many bytes as sent.
SIGNAL_NAME_MAX = 200
SIGNAL_VALUE_MAX_BYTES = 64 * 1024
