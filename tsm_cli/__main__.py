"""`python -m tsm_cli ...`: the `tsm` command."""

import sys

from tsm_cli.main import main

sys.exit(main())
