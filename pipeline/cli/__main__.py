"""`python -m pipeline.cli`: the `quire` command."""

import sys

from pipeline.cli import main

sys.exit(main())
