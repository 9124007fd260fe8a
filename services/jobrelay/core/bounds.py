"""What one submission may ask for: the bounds stated once in ``jobrelay_client/bounds.py``
(standard library only), which the slim client checks a submission against before sending it
and the server's code reads from here."""

from __future__ import annotations

from jobrelay_client.bounds import (
    DEFAULT_MAX_ATTEMPTS as DEFAULT_MAX_ATTEMPTS,
)
from jobrelay_client.bounds import (
    FLOW_KEY_MAX as FLOW_KEY_MAX,
)
from jobrelay_client.bounds import (
    IDEMPOTENCY_KEY_MAX as IDEMPOTENCY_KEY_MAX,
)
from jobrelay_client.bounds import (
    MAX_ATTEMPTS_MAX as MAX_ATTEMPTS_MAX,
)
from jobrelay_client.bounds import (
    MAX_DELAY_SECONDS as MAX_DELAY_SECONDS,
)
from jobrelay_client.bounds import (
    PRIORITY_MAX as PRIORITY_MAX,
)
from jobrelay_client.bounds import (
    PRIORITY_MIN as PRIORITY_MIN,
)
from jobrelay_client.bounds import (
    SIGNAL_NAME_MAX as SIGNAL_NAME_MAX,
)
from jobrelay_client.bounds import (
    SIGNAL_VALUE_MAX_BYTES as SIGNAL_VALUE_MAX_BYTES,
)
from jobrelay_client.bounds import (
    TYPE_NAME_MAX as TYPE_NAME_MAX,
)
