"""`python -m bamasc.cli`: the same as the `bamasc` command."""

import sys

from bamasc.cli import main

sys.exit(main())
