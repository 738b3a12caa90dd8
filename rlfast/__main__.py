"""``python -m rlfast`` runs the command line."""
import sys

from rlfast.cli import main

sys.exit(main())
