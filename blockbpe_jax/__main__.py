"""`python -m blockbpe_jax ...` runs the `blockbpe-jax` command line tool."""

import sys

from .cli import console_main

sys.exit(console_main())
