"""``OnlineCalibration``: a calibration that keeps fitting itself from a serve's live outcomes.

A scheduler loop calls :meth:`OnlineCalibration.update` once per verify step with the step's
confidences, drafts and accepted runs (arrays in, nothing allocated, one Numba kernel), and
:meth:`OnlineCalibration.calibration` when it wants a refit, which goes through the same code as
``calib fit`` (the ``MIN_OUTCOMES`` pooling and position rules). Old outcomes can be forgotten
by a sliding window of steps or an exponential half-life. A drift monitor (two-sided Bernoulli
CUSUM per pool and position, :mod:`specsim.calibration.drift`) watches the same outcomes
against the calibration it started from; :func:`monitor_runs`, :func:`monitor_drafts` and
:func:`monitor_steps` replay logged steps through one. See ``docs/telemetry.md``, "Online calibration".
"""

from __future__ import annotations

import math

import numpy as np

from specsim._checks import (LOGPROB_SLACK, MAX_DEPTH, MAX_ONLINE_RING_VALUES, MAX_WIDTH, check_int, int_problem,
                             number_problem, show)
from specsim.calibration._types import FitCounts
from specsim.calibration.calibration import AcceptanceCalibration, bucket_cells
from specsim.calibration.drift import DriftSettings, reference_streams, report
from specsim.errors import CalibrationError
from specsim.calibration.fit import fit_counts

# Most steps a sliding window may hold (docs/limits.md).
MAX_WINDOW_STEPS = 1 << 20

_F32, _I64 = np.dtype(np.float32), np.dtype(np.int64)


class OnlineCalibration:
    """Running acceptance counts of a live serve, refitted on demand.

    Parameters
    ----------
    calibration : AcceptanceCalibration
        The starting calibration: its drafter and bucket edges are kept, and the drift monitor
        compares live outcomes with its pools and priors. Its probabilities are not counts, so
        the running counts start empty.
    window : int, optional
        Keep only the last ``window`` steps (an exact sliding window).
    half_life : float, optional
        Weigh a step ``half_life`` updates old by one half (counts decay by ``2**(-1/half_life)``
        per update). At most one of ``window`` and ``half_life``; neither keeps every step.
    max_depth : int, optional
        Most drafts a sequence verifies in one step (sizes the step histogram); default 16 or
        the calibration's depth (its position priors), whichever is deeper.
    drift : bool or DriftSettings
        Attach a drift monitor (default settings for True).

    Notes
    -----
    Not thread-safe: it holds mutable buffers that :meth:`update` writes in place. Use one per
    scheduler loop, or guard it with a lock. Memory: ``8 * window * (2 B + (max_depth + 1)**2)``
    bytes for the window's ring.
    """

    def __init__(self, calibration: AcceptanceCalibration, window=None, half_life=None, max_depth=None,
                 drift=True):
        # lazy: Numba loads with the first kernel call
        from specsim.calibration._online_kernels import BAD_CONFIDENCE, online_buffers, online_update_nb

        if not (isinstance(drift, (bool, DriftSettings)) or drift is None):
            raise CalibrationError(f"drift = {show(drift)} must be True, False or a DriftSettings")

        if not isinstance(calibration, AcceptanceCalibration):
            raise CalibrationError(f"OnlineCalibration needs an AcceptanceCalibration, got {type(calibration).__name__}")
        if window is not None and half_life is not None:
            raise CalibrationError("give window or half_life, not both: one rule for forgetting old steps")
        # The window's ring is allocated up front (window x a few hundred floats): its size is
        # bounded below, before anything is allocated.
        problem = window is not None and int_problem(window, "window (steps)", 1, MAX_WINDOW_STEPS)
        problem = problem or (half_life is not None and number_problem(half_life, "half_life (steps)", 0.0,
                                                                        low_open=True))
        if max_depth is None:
            max_depth = min(max(16, len(calibration.priors)), MAX_DEPTH)
        problem = problem or int_problem(max_depth, "max_depth (drafts per sequence per step)", 1, MAX_DEPTH)
        if problem:
            raise CalibrationError(problem)

        row = 2 * calibration.edges.shape[0] + (int(max_depth) + 1) ** 2 + 1
        if window is not None and int(window) * row > MAX_ONLINE_RING_VALUES:
            raise CalibrationError(
                f"window = {int(window):,} steps at max_depth = {int(max_depth)} needs a ring of "
                f"{int(window) * row * 8 / 2**30:.1f} GiB (window x {row:,} values); at most "
                f"{MAX_ONLINE_RING_VALUES * 8 / 2**30:g} GiB: give a window of at most "
                f"{MAX_ONLINE_RING_VALUES // row:,} steps, a smaller max_depth, or half_life (docs/limits.md)")
        self.reference = calibration
        self.window = None if window is None else int(window)
        self.half_life = None if half_life is None else float(half_life)
        self.max_depth = int(max_depth)
        self._decay = 1.0 if half_life is None else 2.0 ** (-1.0 / half_life)
        self.settings = (DriftSettings() if drift is True else drift) if drift else None
        if self.settings is None:
            self.streams = ()
            self._pool_of_bucket = np.zeros(0, dtype=np.int64)
            self._llr = np.zeros((0, 2, 2))
            self._dispersion = ()
            self._threshold = math.inf
        else:
            self.streams, self._pool_of_bucket, self._llr, self._dispersion = reference_streams(calibration,
                                                                                                self.settings)
            self._threshold = float(self.settings.threshold)
        self._cells = bucket_cells(calibration.edges)
        self._buf = buf = online_buffers(calibration.edges.shape[0], self.max_depth, self.window or 0,
                                         len(self.streams))
        self._edges = calibration.edges
        self._state = (buf.flows, self._pool_of_bucket, self._llr, buf.mon_f, buf.mon_i)
        self._kernel = online_update_nb
        self._bad_confidence = BAD_CONFIDENCE
        self.steps_seen = 0

    def update(self, confidences, n_conf, accepted_run) -> None:
        """Fold one verify step's outcomes in.

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (n, m), C-contiguous
            Each sequence's draft confidences (top-1 log-probabilities), NaN where unknown.
        n_conf : ndarray(int64, ndim=1), shape (n,)
            Drafts each sequence verified this step (its first ``n_conf[i]`` confidences), in
            ``0..=min(m, max_depth)``.
        accepted_run : ndarray(int64, ndim=1), shape (n,)
            Drafts each sequence had accepted before the first rejection, ``0..=n_conf[i]``.

        Raises
        ------
        CalibrationError
            Arrays of another dtype, rank or layout (no conversion is made in the hot path), or
            a row out of range (nothing is counted then).
        """
        # Checks without conversion (the hot path allocates nothing). Each attribute read costs
        # about a tenth of the whole update, so only what the kernel cannot check itself is
        # checked here (dtype, rank, layout: a mismatch would compile another specialisation);
        # the kernel checks the lengths and ranges.
        try:
            ok = (confidences.dtype is _F32 and n_conf.dtype is _I64 and accepted_run.dtype is _I64
                  and confidences.ndim == 2 and n_conf.ndim == 1 and accepted_run.ndim == 1
                  and confidences.flags.c_contiguous)
        except AttributeError:
            ok = False
        if not ok:
            raise CalibrationError("update takes a C-contiguous float32 matrix (n, m) of confidences and int64 vectors "
                                   "n_conf and accepted_run of length n")
        step = self.steps_seen
        bad = self._kernel(self._edges, self._cells, confidences, n_conf, accepted_run, self._decay, *self._state,
                           step, self._threshold)
        if bad == -2:
            raise CalibrationError(f"n_conf has {n_conf.shape[0]} and accepted_run {accepted_run.shape[0]} entries for "
                                   f"{confidences.shape[0]} rows of confidences: one per row")
        if bad <= self._bad_confidence:
            row = self._bad_confidence - bad
            j = int(np.argmax(confidences[row, :int(n_conf[row])] > LOGPROB_SLACK))
            raise CalibrationError(
                f"row {row}, draft {j}: confidence {float(confidences[row, j])!r} is above 0: a confidence is a "
                "log-probability, at most 0; for probabilities p give log(p) (nothing was counted)")
        if bad != -1:
            raise CalibrationError(
                f"row {bad}: n_conf {int(n_conf[bad])} and accepted_run {int(accepted_run[bad])} need 0 <= accepted_run "
                f"<= n_conf <= {min(confidences.shape[1], self.max_depth)} (the matrix's columns and max_depth)")
        self.steps_seen = step + 1

    def update_steps(self, steps: np.ndarray) -> None:
        """Fold one step known only as chains by ``(drafts, accepted run)`` (telemetry without
        confidences): their reached drafts count apart as non-finite confidences, their steps
        and the position monitors as in :meth:`update`.

        Parameters
        ----------
        steps : ndarray(int64, ndim=2), shape (max_depth + 1, max_depth + 1)
            Chains by ``[drafts, accepted run]``, zero where ``accepted > drafts``.
        """
        # lazy: Numba loads with the first kernel call
        from specsim.calibration._online_kernels import online_add_steps_nb

        side = self.max_depth + 1
        if not (type(steps) is np.ndarray and steps.dtype is _I64 and steps.shape == (side, side)
                and steps.flags.c_contiguous):
            raise CalibrationError(f"steps must be a C-contiguous int64 matrix ({side}, {side}) of chains by "
                                   "[drafts, accepted run]")
        step = self.steps_seen
        bad = online_add_steps_nb(self._edges.shape[0], steps, self._decay, *self._state, step, self._threshold)
        if bad != -1:
            d, a = divmod(bad, side)
            raise CalibrationError(f"steps[{d}, {a}] = {int(steps[d, a])}: counts are >= 0 and accepted <= drafts")
        self.steps_seen = step + 1

    def counts(self) -> FitCounts:
        """The running counts as :class:`FitCounts` (whole numbers unless a half-life decays them)."""
        buf = self._buf
        nb = self.reference.edges.shape[0]
        side = self.max_depth + 1
        whole = self.half_life is None
        conv = (lambda v: int(round(v))) if whole else float
        c = buf.counts
        hist = c[2 * nb: 2 * nb + side * side].reshape(side, side)
        steps = {(int(d), int(a)): conv(hist[d, a]) for d, a in zip(*np.nonzero(hist))}
        return FitCounts(
            tuple(float(e) for e in self.reference.edges),
            tuple(conv(v) for v in c[:nb]), tuple(conv(v) for v in c[nb:2 * nb]), steps,
            conv(c[-1]), 0, "<online>",
        )

    def calibration(self) -> AcceptanceCalibration:
        """A calibration refitted from the running counts, exactly as ``fit_calibration`` fits
        (pools and position priors under ``MIN_OUTCOMES``; decayed counts are weights). Chain
        outcomes say nothing of draft trees, so the starting calibration's rank acceptance and
        its counts carry over unchanged (docs/calibration.md#draft-trees).

        Raises
        ------
        CalibrationError
            When no pool or no position prior has ``MIN_OUTCOMES`` outcomes yet.
        """
        ref = self.reference
        cal = fit_counts(ref.drafter, self.counts()).calibration
        return cal if ref.rank_acceptance is None else cal.with_rank_acceptance(ref.rank_acceptance, ref.tree_counts)

    def drift(self):
        """Which pools and positions moved away from the starting calibration: a
        :class:`specsim.calibration.drift.DriftReport`."""
        if self.settings is None:
            raise CalibrationError("this OnlineCalibration has no drift monitor (drift=False)")
        return report(self.streams, self._buf.mon_f, self._buf.mon_i, self.steps_seen, self.settings,
                      self._dispersion)

    def statistics(self):
        """The monitor's CUSUM statistics now, ``(streams, 2)`` [down, up] (a copy)."""
        from specsim.calibration._online_kernels import STAT  # lazy: Numba loads with the first kernel call

        return self._buf.mon_f[:, :, STAT].copy()

    def __repr__(self):
        forget = (f"window={self.window}" if self.window else f"half_life={self.half_life}" if self.half_life
                  else "every step")
        return f"OnlineCalibration({forget}, steps_seen={self.steps_seen}, drafter={self.reference.drafter!r})"


# -- logs replayed through a monitor ---------------------------------------------------------------

def monitor_runs(calibration, drafts, accepted, settings=None, width: int = 1, history: bool = False):
    """Replay logged verify steps (no confidences) through a drift monitor.

    Parameters
    ----------
    calibration : AcceptanceCalibration
    drafts, accepted : array_like of int, shape (L,)
        Drafts and accepted run of each logged chain, in serve order.
    width : int
        Chains per monitored step (the batch width they were served at).
    history : bool
        Also return the largest statistic of each stream after every step.

    Returns
    -------
    (DriftReport, ndarray(float64, ndim=2) or None)
        The report and, with ``history``, the statistics ``(steps, streams)`` (max of down/up).
    """
    width = check_int(width, "width", CalibrationError, 1, MAX_WIDTH, "the widest batch")
    drafts = np.ascontiguousarray(drafts, dtype=np.int64).reshape(-1)
    accepted = np.ascontiguousarray(accepted, dtype=np.int64).reshape(-1)
    if drafts.shape != accepted.shape:
        raise CalibrationError(f"{drafts.shape[0]} draft counts for {accepted.shape[0]} accepted runs")
    if drafts.shape[0] and (drafts.min() < 0 or (accepted < 0).any() or (accepted > drafts).any()):
        raise CalibrationError("every chain needs 0 <= accepted <= drafts")
    batches = []
    for lo in range(0, drafts.shape[0], width):
        b = {}
        for d, a in zip(drafts[lo:lo + width].tolist(), accepted[lo:lo + width].tolist()):
            b[(d, a)] = b.get((d, a), 0) + 1
        batches.append(b)
    return monitor_steps(calibration, batches, settings, history)


def chain_runs(priors, depth: int, steps: int, seed: int = 0):
    """Accepted runs of ``steps`` chains of ``depth`` drafts from per-position conditional rates
    (a Bernoulli chain: draft ``j`` accepted with ``priors[j - 1]`` once the drafts before it were;
    past the last prior, the last). For in-control checks of the monitor.

    Returns
    -------
    ndarray(int64, ndim=1), shape (steps,)
    """
    rng = np.random.default_rng(seed)
    p = np.array([priors[min(j, len(priors) - 1)] for j in range(depth)])
    u = rng.random((steps, depth))
    ok = np.cumprod(u < p, axis=1)
    return ok.sum(axis=1).astype(np.int64)


def interval_batches(priors, depth: int, chains: int, intervals: int, logit_sd: float = 0.0, seed: int = 0):
    """Logging intervals of ``chains`` chains of ``depth`` drafts each, as ``(drafts, accepted
    run) -> chains`` (what :func:`monitor_steps` replays), whose rates vary from interval to
    interval as real traffic's do: in interval ``i`` every position's log-odds moves by
    ``logit_sd * z_i`` (``z_i ~ N(0, 1)``, one draw per interval) from ``priors`` (past the last
    prior, the last). ``logit_sd = 0`` is the binomial case. For in-control checks of the
    monitor on over-dispersed traffic.

    Returns
    -------
    list of dict
    """
    rng = np.random.default_rng(seed)
    base = np.array([priors[min(j, len(priors) - 1)] for j in range(depth)], dtype=np.float64)
    with np.errstate(divide="ignore"):
        lo = np.log(base) - np.log1p(-base)
    out = []
    for _ in range(intervals):
        p = 1.0 / (1.0 + np.exp(-(lo + logit_sd * rng.standard_normal())))
        ok = np.cumprod(rng.random((chains, depth)) < p, axis=1)
        runs = np.bincount(ok.sum(axis=1), minlength=depth + 1)
        out.append({(depth, a): int(c) for a, c in enumerate(runs.tolist()) if c})
    return out


def false_alarm_rate(calibration, depth: int, steps: int, runs: int = 200, settings=None, seed: int = 0,
                     width: int = 1):
    """Fraction of ``runs`` in-control simulations (chains drawn from the calibration's own
    priors) of ``steps`` chains each (``width`` per monitored step) that raise any alarm: the
    monitor's family-wise false-alarm rate over that many chains."""
    alarms = 0
    drafts = np.full(steps, depth, dtype=np.int64)
    for r in range(runs):
        acc = chain_runs(calibration.priors, depth, steps, seed + r)
        rep, _ = monitor_runs(calibration, drafts, acc, settings, width)
        alarms += rep.drifted
    return alarms / runs


def monitor_drafts(calibration, step, sequence, position, confidence, accepted, settings=None, history=False):
    """Replay a per-draft log (the ``calib fit --drafts-log`` columns) through a drift monitor,
    one monitored step per distinct ``step`` id in ascending order.

    A chain's accepted run is its drafts before the first rejection; rows after it are not
    reached and do not count, as when fitting. Returns ``(DriftReport, history or None)`` as
    :func:`monitor_runs`.
    """
    step = np.asarray(step, dtype=np.int64).reshape(-1)
    seq = np.asarray(sequence, dtype=np.int64).reshape(-1)
    pos = np.asarray(position, dtype=np.int64).reshape(-1)
    conf = np.asarray(confidence, dtype=np.float64).reshape(-1)
    acc = np.asarray(accepted).astype(bool).reshape(-1)
    if step.shape[0] == 0:
        raise CalibrationError("the per-draft log has no rows")
    if pos.min() < 1:
        raise CalibrationError("draft positions start at 1")
    order = np.lexsort((pos, seq, step))
    step, seq, pos, conf, acc = step[order], seq[order], pos[order], conf[order], acc[order]
    new_chain = np.ones(step.shape[0], dtype=bool)
    new_chain[1:] = (step[1:] != step[:-1]) | (seq[1:] != seq[:-1])
    starts = np.flatnonzero(new_chain)
    lengths = np.diff(np.append(starts, step.shape[0]))
    chain = np.cumsum(new_chain) - 1
    if not np.array_equal(pos, np.arange(step.shape[0]) - starts[chain] + 1):
        raise CalibrationError("a chain's positions do not run 1, 2, .. once each")
    first_rej = np.where(acc, lengths[chain] + 1, pos)
    runs = np.minimum.reduceat(first_rej, starts) - 1
    runs = np.minimum(runs, lengths).astype(np.int64)
    depth = _monitored_depth(int(lengths.max()), "the per-draft log's longest chain")
    mat = np.full((starts.shape[0], depth), np.nan, dtype=np.float32)
    with np.errstate(over="ignore"):
        mat[chain, pos - 1] = np.where(np.isfinite(conf), conf, np.nan).astype(np.float32)
    online = OnlineCalibration(calibration, max_depth=max(depth, 1), drift=settings or DriftSettings())
    chain_step = step[starts]
    bounds = np.flatnonzero(np.append(True, chain_step[1:] != chain_step[:-1]))
    bounds = np.append(bounds, starts.shape[0])
    lengths = lengths.astype(np.int64)
    hist = np.empty((bounds.shape[0] - 1, len(online.streams))) if history else None
    for t in range(bounds.shape[0] - 1):
        lo, hi = bounds[t], bounds[t + 1]
        online.update(mat[lo:hi], lengths[lo:hi], runs[lo:hi])
        if history:
            hist[t] = online.statistics().max(axis=1)
    return online.drift(), hist


def _monitored_depth(depth: int, what: str) -> int:
    """``depth`` of the data replayed, refused past what the monitor tracks, in the data's terms."""
    if depth > MAX_DEPTH:
        raise CalibrationError(
            f"{what} has {depth:,} drafts per sequence: drift monitoring tracks steps of at most "
            f"{MAX_DEPTH} drafts (docs/limits.md); no serve drafts that deep, so check the log's drafts column "
            "(or give only the steps a serve ran)")
    return depth


def monitor_steps(calibration, batches, settings=None, history=False):
    """Replay steps known as chains by ``(drafts, accepted run)`` through a drift monitor.

    Parameters
    ----------
    batches : sequence of dict
        One per monitored step (a log interval, a scrape difference, a request):
        ``(drafts, accepted run) -> chains``.

    Returns
    -------
    (DriftReport, ndarray(float64, ndim=2) or None)
        As :func:`monitor_runs`.
    """
    depth = _monitored_depth(max((d for b in batches for d, _ in b), default=1), "the deepest step given")
    online = OnlineCalibration(calibration, max_depth=max(depth, 1), drift=settings or DriftSettings())
    hist = np.empty((len(batches), len(online.streams))) if history else None
    grid = np.zeros((depth + 1, depth + 1), dtype=np.int64)
    for t, b in enumerate(batches):
        grid[:] = 0
        for (d, a), c in b.items():
            grid[d, a] += c
        online.update_steps(grid)
        if history:
            hist[t] = online.statistics().max(axis=1)
    return online.drift(), hist
