"""A small progress line on stderr for long work (sweeps, simulations, measurements).

On a terminal it redraws one line at most five times a second; elsewhere (logs, CI) it prints a
line at every tenth of the work, so a log shows progress without flooding.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """Report ``done / total`` units of work with rate and time left.

    Parameters
    ----------
    total : int
        Units of work expected (0 or less: unknown, no percentage).
    desc : str
        What is being done, shown at the start of the line.
    enabled : bool, optional
        Default: on. Pass False to silence it (``--quiet``).
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, stream=None, unit: str = ""):
        self.total = int(total)
        self.desc = desc
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.unit = unit
        self.done = 0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if self._tty:
            if now - self._last_draw >= 0.2 or self.done >= self.total > 0:
                self._last_draw = now
                self.stream.write("\r" + self._line(now))
                self.stream.flush()
        elif self.total > 0:
            tenth = min(10, self.done * 10 // self.total)
            if tenth != self._last_tenth:
                self._last_tenth = tenth
                self.stream.write(self._line(now) + "\n")
                self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = now - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        unit = f" {self.unit}" if self.unit else ""
        if self.total > 0:
            pct = 100.0 * self.done / self.total
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta = f", {left:.0f} s left" if left != float("inf") else ""
            return f"{self.desc}: {pct:5.1f}% ({self.done}/{self.total}{unit}, {elapsed:.1f} s{eta})"
        return f"{self.desc}: {self.done}{unit} ({elapsed:.1f} s)"

    def close(self) -> None:
        if self.enabled and self._tty:
            self.stream.write("\r" + self._line(time.monotonic()) + "\n")
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
