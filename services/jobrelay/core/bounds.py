"""What one submission may ask for: the bounds stated once in ``jobrelay_client/bounds.py``
(standard library only), which the slim client checks a submission against before sending it
and the server's code reads from here."""

from __future__ import annotations

from jobrelay_client.bounds import (
    DEFAULT_MAX_ATTEMPTS as DEFAULT_MAX_ATTEMPTS,
    FLOW_KEY_MAX as FLOW_KEY_MAX,
    IDEMPOTENCY_KEY_MAX as IDEMPOTENCY_KEY_MAX,
    MAX_ATTEMPTS_MAX as MAX_ATTEMPTS_MAX,
    MAX_DELAY_SECONDS as MAX_DELAY_SECONDS,
    PRIORITY_MAX as PRIORITY_MAX,
    PRIORITY_MIN as PRIORITY_MIN,
    SIGNAL_NAME_MAX as SIGNAL_NAME_MAX,
    SIGNAL_VALUE_MAX_BYTES as SIGNAL_VALUE_MAX_BYTES,
    TYPE_NAME_MAX as TYPE_NAME_MAX,
)
