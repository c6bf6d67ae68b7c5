"""``python -m benchmarks``: see :mod:`benchmarks.suite`."""

import sys

from benchmarks.suite import main

sys.exit(main())
