"""`python -m blockbpe_jax.cli ...`: the `blockbpe-jax` command line tool."""

import sys

from . import main

sys.exit(main())
