import sys

try:
    from specsim.cli import run
except KeyboardInterrupt:  # Ctrl-C while the command modules load
    print("specsim: interrupted", file=sys.stderr)
    sys.exit(130)

run()
