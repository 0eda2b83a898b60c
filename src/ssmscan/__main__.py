"""``python -m ssmscan``: the ``ssmscan`` command line (see :mod:`ssmscan.cli`)."""

import sys

from ssmscan.cli import main

sys.exit(main())
