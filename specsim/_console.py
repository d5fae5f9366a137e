"""The ``specsim`` command's first step (the console script and ``python -m specsim``).

Only this module and ``specsim/__init__`` load before the guard below, so a Ctrl-C at the very
start, while the command modules load, exits 130 with one line instead of a traceback.
"""

import sys


def run() -> None:
    """Load the command modules, then run the command (:func:`specsim.cli.run`)."""
    try:
        from specsim.cli import run as command
    except KeyboardInterrupt:  # Ctrl-C while the command modules load
        print("specsim: interrupted", file=sys.stderr)
        sys.exit(130)
    command()
