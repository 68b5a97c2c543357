"""``python -m r2med.cli``: the same as the ``r2med`` command."""

import sys

from r2med.cli import main

sys.exit(main())
