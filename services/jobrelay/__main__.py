import sys

from jobrelay.cli import main

sys.exit(main())
