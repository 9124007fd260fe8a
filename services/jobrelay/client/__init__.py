"""The jobrelay API from Python: the client of the slim package ``jobrelay_client``
(``pip install jobrelay-client``; its docstring says what each call does), re-exported, so
that ``jobrelay.Client`` and ``from jobrelay.client import ...`` keep working. One
implementation: nothing is defined here."""

# Every public name of jobrelay_client (its __all__; each imported there on first use).
from jobrelay_client import *  # noqa: F403
from jobrelay_client import __all__ as __all__
