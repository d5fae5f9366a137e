"""The progress line of long work (simulations, replays, sweeps, measurements), drawn by tqdm.

It goes to stderr, so the results on stdout stay clean. It is shown on a terminal only: piped
into a file or a CI log it is off, unless asked for with the environment variable
``SPECSIM_PROGRESS=1`` (then tqdm prints a line at most every :data:`LOG_INTERVAL_S` seconds).
``--quiet`` turns it off everywhere.
"""

from __future__ import annotations

import os
import sys
import threading

# Seconds between lines when the progress goes to a log rather than a terminal.
LOG_INTERVAL_S = 10.0
# Seconds between redraws of a live line on a terminal.
LIVE_TICK_S = 0.5


def wanted(stream=None) -> bool:
    """Whether a progress line belongs on ``stream`` (default stderr): a terminal, or asked for."""
    stream = stream or sys.stderr
    if os.environ.get("SPECSIM_PROGRESS", "").strip() not in ("", "0"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """Report ``done / total`` units of work with rate and time left.

    Parameters
    ----------
    total : int
        Units of work expected (0 or less: unknown, no percentage).
    desc : str
        What is being done, shown at the start of the line.
    enabled : bool, optional
        Default: on. Pass False to silence it (``--quiet``); on only where :func:`wanted`.
    unit : str, optional
        What one unit is ("requests", "points").

    live : bool, optional
        On a terminal, redraw the line every :data:`LIVE_TICK_S` seconds while it is open, so its
        elapsed time moves through work that reports seldom (a summary of millions of requests,
        a long trace being generated).
    delay_s : float, optional
        Show the line only once the work has taken this long (short work prints nothing).

    Not safe to share between threads without a lock (the engine's callers hold one).
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, stream=None, unit: str = "", live: bool = False,
                 delay_s: float = 0.0):
        self.total = int(total)
        self.done = 0
        self.stream = stream or sys.stderr
        self._bar = None
        self._ticker = None
        if enabled and wanted(self.stream):
            from tqdm import tqdm  # optional: loaded only for the progress bar

            tty = bool(getattr(self.stream, "isatty", lambda: False)())
            self._bar = tqdm(total=self.total if self.total > 0 else None, desc=desc, unit=f" {unit}" if unit else "it",
                             file=self.stream, dynamic_ncols=tty, mininterval=0.2 if tty else LOG_INTERVAL_S,
                             leave=True, unit_scale=self.total >= 100_000, delay=delay_s)
            if live and tty:
                self._ticker = _Ticker(self._bar)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def set_total(self, total: int) -> None:
        """Change the work expected (some of it turned out not to be needed)."""
        self.total = int(total)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Ticker:
    """Redraws a tqdm line every :data:`LIVE_TICK_S` seconds from a daemon thread until stopped
    (tqdm's redraw takes the bar's own lock)."""

    def __init__(self, bar):
        self._bar = bar
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-ticker", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(LIVE_TICK_S):
            if self._bar._time() - self._bar.start_t >= self._bar.delay:  # tqdm's refresh skips no delay
                self._bar.refresh()

    def stop(self):
        self._stop.set()
        self._thread.join()
