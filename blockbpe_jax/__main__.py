"""`python -m blockbpe_jax ...` runs the `blockbpe-jax` command line tool."""

import sys

from .cli import main

sys.exit(main())
