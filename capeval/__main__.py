"""``python -m capeval``: the ``capeval`` command."""
import sys

from capeval.cli import main

sys.exit(main())
