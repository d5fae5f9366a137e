"""The depth planner's public face: one-shot functions, the scheduler-loop ``Planner``, and the
serve-side load of a table and calibration (SPEC §4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.errors import KeyMismatchError, PlanError
from specsim.plan._kernels import sequence_depths_nb
from specsim.plan._types import plan_arrays, plan_workspace

_F32 = np.dtype(np.float32)
from specsim.table import CostTable, TableKey

# Widths up to this many get their propose() answer precomputed at construction.
MEMO_LIMIT = 4096
NO_CAP = 1 << 62


def check_slack(slack) -> float:
    """``slack`` as a float in [0, 1), else PlanError."""
    try:
        value = float(slack)
    except (TypeError, ValueError):
        raise PlanError(f"slack {slack!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise PlanError(
            f"slack {value!r} is outside [0, 1): 0 means no slower than depth 1, values near 1 put energy first"
        )
    return value


def _count(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise PlanError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _cap(max_seqs) -> int:
    return NO_CAP if max_seqs is None else min(_count(max_seqs, "max_seqs"), NO_CAP)


def _cum_priors(cal, max_k):
    from specsim.plan._kernels import cum_priors_nb

    out = np.empty(max_k + 1)
    cum_priors_nb(cal.priors, max_k, out)
    return out


def ragged_confidences(confidences):
    """A list of per-sequence confidence lists -> ``(float32[n, m] NaN-padded, int64[n] counts)``."""
    rows = [np.asarray(r, dtype=np.float32).reshape(-1) for r in confidences]
    m = max((r.shape[0] for r in rows), default=0)
    conf = np.full((len(rows), m), np.nan, dtype=np.float32)
    for i, r in enumerate(rows):
        conf[i, : r.shape[0]] = r
    return conf, np.array([r.shape[0] for r in rows], dtype=np.int64)


def propose_depth(table: CostTable, cal: AcceptanceCalibration, n: int, slack: float, max_seqs: int) -> int:
    """One draft depth for a batch of ``n`` sequences, before drafting (SPEC §4.1).

    Picks the depth with the most expected tokens per joule among those whose tokens per ms are
    at least ``(1 - slack)`` times depth 1's; above ``max_seqs`` sequences, 0 (plain decode).
    """
    from specsim.plan._kernels import propose_depth_nb

    n, slack, cap = _count(n, "n"), check_slack(slack), _cap(max_seqs)
    scratch = np.empty((table.max_k + 1, 4))
    return int(propose_depth_nb(table.widths, table.costs, _cum_priors(cal, table.max_k), n, slack, cap, scratch))


def goodput_depth(table: CostTable, cal: AcceptanceCalibration, n: int, max_seqs=None) -> int:
    """The depth with the most expected tokens per ms at width ``n`` (energy ignored)."""
    from specsim.plan._kernels import goodput_depth_nb

    n, cap = _count(n, "n"), _cap(max_seqs)
    scratch = np.empty((table.max_k + 1, 4))
    return int(goodput_depth_nb(table.widths, table.costs, _cum_priors(cal, table.max_k), n, cap, scratch))


def sequence_depths(table, cal, confidences, known_drafts, k_max, row_budget, slack) -> list:
    """How many of each sequence's drafts to verify, after drafting (SPEC §4.2).

    Parameters
    ----------
    confidences : sequence of sequences of float
        Per sequence, the top-1 log-probability of each of its drafts (ragged, possibly empty;
        NaN = unmeasured).
    known_drafts : sequence of int
        Drafts each sequence has.
    k_max, row_budget : int
    slack : float in [0, 1)

    Returns
    -------
    list of int
    """
    planner = Planner(table, cal, slack=slack, memo=False)
    conf, n_conf = ragged_confidences(confidences)
    known = np.asarray(known_drafts, dtype=np.int64).reshape(-1)
    if known.shape[0] != conf.shape[0]:
        raise PlanError(f"known_drafts has {known.shape[0]} entries for {conf.shape[0]} sequences of confidences")
    return planner.depths(conf, n_conf, known, _count(k_max, "k_max"), _count(row_budget, "row_budget")).tolist()


class Planner:
    """Draft-depth planning for a serve's scheduler loop, built once per (table, calibration, slack).

    Everything that depends only on those is computed here: the cumulative position priors,
    ``propose`` answers for every width up to ``min(max_seqs, 4096)``, and workspaces, so that
    :meth:`propose` is a list lookup and :meth:`depths` allocates nothing when ``out`` is given.

    Parameters
    ----------
    table : CostTable
    cal : AcceptanceCalibration
    slack : float in [0, 1)
    max_seqs : int, optional
        Speculation cap: above this width every step is a plain decode. Default: no cap.
    """

    def __init__(self, table: CostTable, cal: AcceptanceCalibration, slack: float = 0.0, max_seqs=None, memo=True):
        from specsim.plan._kernels import propose_table_nb

        self.table = table
        self.calibration = cal
        self.slack = check_slack(slack)
        self.max_seqs = _cap(max_seqs)
        self.max_k = table.max_k
        self.cum_priors = _cum_priors(cal, table.max_k)
        self._arrays = plan_arrays(table, cal)
        self._reserve(64)
        size = min(self.max_seqs, MEMO_LIMIT) + 1 if memo else 0
        self._memo = np.empty(size, dtype=np.int64)
        if size:
            propose_table_nb(table.widths, table.costs, self.cum_priors, self.slack, self.max_seqs, self._memo,
                             self._scratch)
        self._memo_list = self._memo.tolist()
        self._memo_len = size

    def _reserve(self, n):
        ws = getattr(self, "_ws", None)
        if ws is None or ws.rows < n:
            self._ws = plan_workspace(n, self.max_k)
            self._gains, self._owner, self._counts, self._scratch = self._ws

    # -- before drafting ------------------------------------------------------------------
    def propose(self, n: int) -> int:
        """Draft depth for a batch of width ``n`` (SPEC §4.1)."""
        if 0 <= n < self._memo_len:
            return self._memo_list[n]
        from specsim.plan._kernels import propose_depth_nb

        n = _count(n, "n")
        return int(propose_depth_nb(self.table.widths, self.table.costs, self.cum_priors, n, self.slack,
                                    self.max_seqs, self._scratch))

    def propose_many(self, ns, out=None):
        """Depths for an array of widths in one call.

        Parameters
        ----------
        ns : ndarray(int64, ndim=1), shape (N,)
        out : ndarray(int64, ndim=1), shape (N,), optional
            Filled in place when given.
        """
        from specsim.plan._kernels import propose_many_nb

        ns = np.ascontiguousarray(ns, dtype=np.int64)
        if ns.ndim != 1 or (ns.shape[0] and ns.min() < 0):
            raise PlanError("widths must be a 1-d array of non-negative integers")
        if out is None:
            out = np.empty(ns.shape[0], dtype=np.int64)
        elif out.shape[0] < ns.shape[0]:
            raise PlanError(f"out has {out.shape[0]} entries for {ns.shape[0]} widths")
        propose_many_nb(self._memo, self.table.widths, self.table.costs, self.cum_priors, self.slack, self.max_seqs,
                        ns, out, self._scratch)
        return out

    def goodput(self, n: int) -> int:
        """The depth with the most expected tokens per ms at width ``n`` (energy ignored)."""
        from specsim.plan._kernels import goodput_depth_nb

        return int(goodput_depth_nb(self.table.widths, self.table.costs, self.cum_priors, _count(n, "n"),
                                    self.max_seqs, self._scratch))

    # -- after drafting -------------------------------------------------------------------
    def depths(self, confidences, n_conf, known_drafts, k_max, row_budget, out=None):
        """Drafts to verify per sequence (SPEC §4.2).

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (n, m)
        n_conf : ndarray(int64, ndim=1), shape (n,)
            How many entries of each row are real.
        known_drafts : ndarray(int64, ndim=1), shape (n,)
        k_max, row_budget : int
        out : ndarray(int64, ndim=1), shape (n,), optional
            Filled in place; nothing is allocated when it is given.

        Returns
        -------
        ndarray(int64, ndim=1), shape (n,)
        """
        n = confidences.shape[0]
        if (confidences.dtype != _F32 or not confidences.flags.c_contiguous or confidences.ndim != 2
                or n_conf.shape[0] != n or known_drafts.shape[0] != n):
            confidences, n_conf, known_drafts = self._coerce(confidences, n_conf, known_drafts)
        if out is None:
            out = np.empty(n, dtype=np.int64)
        elif out.shape[0] != n:
            raise PlanError(f"out has {out.shape[0]} entries for {n} sequences")
        if self._ws.rows < n:
            self._reserve(n)
        sequence_depths_nb(self._arrays, confidences, n_conf, known_drafts, k_max, row_budget, self.slack, out,
                           self._ws)
        return out

    @staticmethod
    def _coerce(confidences, n_conf, known_drafts):
        conf = np.ascontiguousarray(confidences, dtype=np.float32)
        n_conf = np.ascontiguousarray(n_conf, dtype=np.int64)
        known = np.ascontiguousarray(known_drafts, dtype=np.int64)
        n = conf.shape[0]
        if conf.ndim != 2 or n_conf.shape != (n,) or known.shape != (n,):
            raise PlanError(
                f"confidences (n, m), n_conf (n,) and known_drafts (n,) disagree: shapes {conf.shape}, "
                f"{n_conf.shape}, {known.shape}"
            )
        return conf, n_conf, known

    def depths_many(self, confidences, n_conf, known_drafts, offsets, k_max, row_budget, out=None):
        """:meth:`depths` for many batches laid end to end in one call.

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (R, m)
            The rows of every batch, batch after batch.
        n_conf, known_drafts : ndarray(int64, ndim=1), shape (R,)
        offsets : ndarray(int64, ndim=1), shape (B + 1,)
            Batch ``b`` is rows ``offsets[b]:offsets[b + 1]``.
        k_max, row_budget : int or ndarray(int64, ndim=1), shape (B,)
        out : ndarray(int64, ndim=1), shape (R,), optional
        """
        from specsim.plan._kernels import sequence_depths_many_nb

        conf, n_conf, known = self._coerce(confidences, n_conf, known_drafts)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        rows = conf.shape[0]
        if conf.ndim != 2 or n_conf.shape != (rows,) or known.shape != (rows,):
            raise PlanError("confidences (R, m), n_conf (R,) and known_drafts (R,) disagree in shape")
        if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets[0] != 0 or offsets[-1] != rows or (np.diff(offsets) < 0).any():
            raise PlanError(f"offsets must rise from 0 to {rows} (the number of rows)")
        batches = offsets.shape[0] - 1
        k_max = np.ascontiguousarray(np.broadcast_to(np.asarray(k_max, dtype=np.int64), (batches,)))
        row_budget = np.ascontiguousarray(np.broadcast_to(np.asarray(row_budget, dtype=np.int64), (batches,)))
        if out is None:
            out = np.empty(rows, dtype=np.int64)
        widest = int(np.diff(offsets).max()) if batches else 0
        self._reserve(widest)
        sequence_depths_many_nb(self._arrays, conf, n_conf, known, offsets, k_max, row_budget, self.slack, out,
                                self._ws)
        return out


@dataclass(frozen=True)
class SpecCostState:
    """A table, its drafter's calibration and the slack, as a serve loads and checks them (§4.4)."""

    table: CostTable
    calibration: AcceptanceCalibration
    slack: float

    @classmethod
    def load(cls, table_path, calibration_path, serve_key: TableKey, drafter_key: DrafterKey, slack: float):
        """Load both files and refuse, listing every mismatch, unless the table's key checks
        clean against ``serve_key``, the calibration's drafter equals ``drafter_key`` and
        ``0 <= slack < 1``."""
        table = CostTable.load(table_path)
        cal = AcceptanceCalibration.load(calibration_path)
        problems = [f"table {table_path}: {m}" for m in table.key.check(serve_key)]
        for field in ("weights_sha256", "vocab", "quantization", "context"):
            mine, theirs = getattr(cal.drafter, field), getattr(drafter_key, field)
            if mine != theirs:
                problems.append(f"calibration {calibration_path}: drafter {field}: fitted on {mine!r}, serve has {theirs!r}")
        try:
            slack = check_slack(slack)
        except PlanError as e:
            problems.append(str(e))
        if problems:
            raise KeyMismatchError("the spec-cost table and calibration cannot be used by this serve", problems)
        return cls(table, cal, slack)

    def planner(self, max_seqs=None) -> Planner:
        """A :class:`Planner` over this state."""
        return Planner(self.table, self.calibration, self.slack, max_seqs)


