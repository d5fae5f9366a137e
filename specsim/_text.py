"""Plain-text output shared by the library's reports and the command line."""

from __future__ import annotations
from specsim.errors import printable


def format_grid(header, rows) -> str:
    """A plain, aligned text table; control characters in cells (user-given names) escaped."""
    cells = [list(map(printable, header))] + [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
