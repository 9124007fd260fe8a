"""``python -m jobrelay.cli``, the same as ``python -m jobrelay``."""

import sys

from jobrelay.cli import main

sys.exit(main())
