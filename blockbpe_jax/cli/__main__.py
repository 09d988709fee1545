"""`python -m blockbpe_jax.cli ...`: the `blockbpe-jax` command line tool."""

import sys

from . import console_main

sys.exit(console_main())
