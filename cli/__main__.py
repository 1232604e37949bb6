"""`python3 -m cli`: the fstrace command, as ./fstrace and the installed fstrace start it (with the checkout, or
the installed package's directory, as PYTHONPATH)."""
import sys

from cli.commands import main

sys.exit(main())
