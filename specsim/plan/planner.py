"""The depth planner's public face: one-shot functions, the scheduler-loop ``Planner``, and the
serve-side load of a table and calibration (docs/planner.md).

Why one module of this size: ``Planner`` is one class whose every method reads the same
calibration swap and context cache (``_install``, ``_slot``); its arithmetic lives in the kernels
and in ``_trees.py``, its checks in ``_checks.py``, and what is left is the class itself.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.calibration.calibration import cell_probabilities
from specsim.errors import KeyMismatchError, PlanError, TableError, TreeError
from specsim.plan._checks import cap_arg, confidences_arg, count_arg, counts_arg, out_arg
from specsim.plan._explain import ProposeExplanation, explain_propose
from specsim.plan._trees import NO_TREE_TABLE, choose_tree, tree_shapes
from specsim.plan._types import (PACK_HEADER, TreePlan, pack_plan_arrays, plan_arrays, workspace_buffer,
                                 workspace_views_nb)
from specsim.table import CostTable, TableKey
from specsim._checks import INT64_MAX, MAX_TREE_DEPTH, MAX_TREE_NODES, int_problem, logprob_problem, show, slack_problem
from specsim.plan._kernels import (
    cum_priors_nb, goodput_depth_nb, propose_at_context_nb, propose_depth_nb, propose_many_nb, propose_table_nb,
    sequence_depths_many_nb,
)
from specsim.plan._entry_kernels import planner_depths_nb
from specsim.table._kernels import context_slice_nb
from specsim.table.cost_table import check_context
from specsim.tree.pricing import TREE_ATTENTION_FACTOR, check_tree_attention_factor

# Widths up to this many get their propose() answer precomputed at construction.
MEMO_LIMIT = 4096
# An unset max_seqs: the planner takes widths up to int64's end (count_arg), so only a cap at that
# end bounds nothing a width can reach; the engine's NO_CAP (specsim._checks) would act as a cap
# nobody set on the widest of them.
UNCAPPED_WIDTH = INT64_MAX
# A thread's first workspace holds this many sequences; it grows to the widest batch seen.
FIRST_ROWS = 64


def check_slack(slack) -> float:
    """``slack`` as a float in [0, 1) (a real number: not a string or a boolean; -0 is 0), else
    PlanError."""
    problem = slack_problem(slack)
    if problem:
        raise PlanError(problem)
    return float(slack) + 0.0


def _cap(max_seqs) -> int:
    return UNCAPPED_WIDTH if max_seqs is None else cap_arg(max_seqs, "max_seqs")


def _cum_priors(cal, max_k):
    out = np.empty(max_k + 1)
    cum_priors_nb(cal.priors, max_k, out)
    return out


def _refuse_positive_confidences(conf, n_conf) -> None:
    """The confidences in use (row i's first ``n_conf[i]``) must be log-probabilities, as the
    command line requires (docs/limits.md)."""
    used = np.arange(conf.shape[1])[None, :] < n_conf[:, None]
    problem = logprob_problem(conf[used])
    if problem:
        raise PlanError(problem)


def ragged_confidences(confidences):
    """A list of per-sequence confidence lists -> ``(float32[n, m] NaN-padded, int64[n] counts)``."""
    try:
        # A finite log-prob past float32's range is -inf there: the first bucket, as in the fit.
        with np.errstate(over="ignore"):
            rows = [np.asarray(r, dtype=np.float32).reshape(-1) for r in confidences]
    except (TypeError, ValueError) as e:
        raise PlanError(f"confidences must be a list of lists of numbers, one list per sequence ({e})") from None
    m = max((r.shape[0] for r in rows), default=0)
    conf = np.full((len(rows), m), np.nan, dtype=np.float32)
    for i, r in enumerate(rows):
        conf[i, : r.shape[0]] = r
    return conf, np.array([r.shape[0] for r in rows], dtype=np.int64)


def propose_depth(table: CostTable, cal: AcceptanceCalibration, n: int, slack: float, max_seqs: int) -> int:
    """One draft depth for a batch of ``n`` sequences, before drafting (docs/planner.md).

    Picks the depth with the most expected tokens per joule among those whose tokens per ms are
    at least ``(1 - slack)`` times depth 1's; above ``max_seqs`` sequences, 0 (plain decode).
    """
    return Planner(table, cal, slack=slack, max_seqs=max_seqs, memo=False).propose(n)


def goodput_depth(table: CostTable, cal: AcceptanceCalibration, n: int, max_seqs=None) -> int:
    """The depth with the most expected tokens per ms at width ``n`` (energy ignored)."""
    return Planner(table, cal, max_seqs=max_seqs, memo=False).goodput(n)


def sequence_depths(table, cal, confidences, known_drafts, k_max, row_budget, slack) -> list:
    """How many of each sequence's drafts to verify, after drafting (docs/planner.md).

    Parameters
    ----------
    confidences : sequence of sequences of float
        Per sequence, the top-1 log-probability of each of its drafts (ragged, possibly empty;
        NaN = unmeasured).
    known_drafts : sequence of int
        Drafts each sequence has (>= 0; values past 2**63 - 1 count as 2**63 - 1).
    k_max, row_budget : int
        Deepest verify depth and most draft rows, >= 0; values past 2**63 - 1 mean no bound.
    slack : float in [0, 1)

    Returns
    -------
    list of int
    """
    planner = Planner(table, cal, slack=slack, memo=False)
    conf, n_conf = ragged_confidences(confidences)
    known = counts_arg(known_drafts, conf.shape[0], "known_drafts")
    return planner.depths(conf, n_conf, known, k_max, row_budget).tolist()


def _checked_context(context) -> float:
    """``check_context``'s float, its refusal as the planner's ``PlanError``. A serve's context
    moves every step: a plain float in range is taken as it is, without the full check."""
    if type(context) is float and 0.0 < context < math.inf:
        return context
    try:
        return check_context(context)
    except TableError as e:
        raise PlanError(str(e)) from None


# Most contexts one Planner keeps planning inputs for; past it the cache starts again.
CONTEXT_CACHE = 256
# Most propose_tree answers one Planner keeps (by width, context and bounds); past it the memo
# starts again.
TREE_MEMO = 1 << 16
# The last-context slot before any context is asked for: None is never a context.
_NO_CONTEXT = (None, None, None)


class _Calibrated(NamedTuple):
    """Everything a Planner derives from its calibration, swapped as one reference."""

    calibration: AcceptanceCalibration
    arrays: object  # PlanArrays
    cell_p: np.ndarray  # calibration.cell_probabilities, also inside packed
    packed: np.ndarray
    cum_priors: np.ndarray
    memo: np.ndarray
    memo_list: list
    # propose answers by width for the context slot: every precomputed width here, the widths
    # asked for so far at a context (a dict, so a negative or unanswered width is a KeyError).
    memo_map: dict
    # propose_tree: its answers by (n, context, max_nodes, max_depth) and the best-tree shapes
    # by max_depth, one pair per calibration (a context's inputs share their calibration's).
    tree_plans: dict
    tree_shapes: dict


_KERNEL_LOCK = threading.Lock()
_KERNEL = []


def _depths_kernel(packed, work):
    """``planner_depths_nb``, compiled (or loaded from the disk cache) for the one set of
    argument types it is meant for, then closed to others: a call with any other type then fails
    dispatch at once (a TypeError the Planner turns into a check of every argument) instead of
    compiling a new version or converting silently."""
    if not _KERNEL:
        with _KERNEL_LOCK:
            if not _KERNEL:
                empty = np.empty(0, dtype=np.int64)
                planner_depths_nb(packed, 0.0, np.empty((0, 0), dtype=np.float32), empty, empty, 0, 0,
                                  np.empty(0, dtype=np.int64), work, True)
                planner_depths_nb.disable_compile()
                _KERNEL.append(planner_depths_nb)
    return _KERNEL[0]


class Planner:
    """Draft-depth planning for a serve's scheduler loop, built once per (table, calibration, slack).

    Everything that depends only on those is computed here: the cumulative position priors,
    ``propose`` answers for every width up to ``min(max_seqs, 4096)``, and the kernel's packed
    inputs, so that :meth:`propose` is a list lookup and :meth:`depths` allocates nothing when
    ``out`` is given.

    Thread safety: one Planner may be shared by any number of threads. Each thread gets its own
    workspace on its first :meth:`depths` call (thread-local, grown to the widest batch that
    thread has planned), and :meth:`update_calibration` swaps the calibration-derived inputs as
    one reference, so a concurrent call sees either the old calibration or the new one.

    Parameters
    ----------
    table : CostTable
    cal : AcceptanceCalibration
    slack : float in [0, 1)
    max_seqs : int, optional
        Speculation cap: above this width every step is a plain decode. Default: no cap.
    memo : bool
        Precompute ``propose`` for small widths (default True; one-shot uses skip it).
    tree_attention_factor : float
        In [1, 10]: what :meth:`propose_tree` multiplies a branching tree's verify cost by
        (default ``specsim.tree.TREE_ATTENTION_FACTOR``, docs/planner.md#pricing).
    """

    def __init__(self, table: CostTable, cal: AcceptanceCalibration, slack: float = 0.0, max_seqs=None, memo=True,
                 *, tree_attention_factor: float = TREE_ATTENTION_FACTOR):
        if not isinstance(table, CostTable):
            raise PlanError(f"table must be a CostTable, got {type(table).__name__}")
        if not isinstance(cal, AcceptanceCalibration):
            raise PlanError(f"cal must be an AcceptanceCalibration, got {type(cal).__name__}")
        self.table = table
        self.slack = check_slack(slack)
        self.tree_attention_factor = check_tree_attention_factor(tree_attention_factor)
        self.max_seqs = _cap(max_seqs)
        self.max_k = table.max_k
        self._memo_size = min(self.max_seqs, MEMO_LIMIT) + 1 if memo else 0
        self._local = threading.local()
        self._update_lock = threading.Lock()
        self._install(self._derive(cal))

    @property
    def _kernel(self):
        # Compiled (or loaded) on the first per-sequence call, not with the Planner: a command
        # that only asks for a batch's depth never pays for the per-sequence kernel.
        return _KERNEL[0] if _KERNEL else _depths_kernel(self._packed, self._workspace(1))

    # -- the calibration ------------------------------------------------------------------
    def _derive(self, cal, table=None, memo_size=None) -> _Calibrated:
        table = self.table if table is None else table
        memo_size = self._memo_size if memo_size is None else memo_size
        arrays = plan_arrays(table, cal)
        cum = _cum_priors(cal, self.max_k)
        memo = np.empty(memo_size, dtype=np.int64)
        if memo_size:
            propose_table_nb(arrays.widths, arrays.costs, cum, self.slack, self.max_seqs, memo,
                             np.empty((self.max_k + 1, 4)))
        memo_list = memo.tolist()
        cell_p = cell_probabilities(cal.edges, cal.p_accept)
        return _Calibrated(cal, arrays, cell_p, pack_plan_arrays(arrays, cell_p), cum, memo, memo_list,
                           dict(enumerate(memo_list)), {}, {})

    def _inputs_at(self, current: _Calibrated, c: float) -> _Calibrated:
        """The planning inputs at context ``c``: ``current``'s (the reference grid's, the same
        calibration) with the step costs replaced by the table's grid at ``c``, interpolated as
        ``CostTable.at_context`` does, so they are the inputs ``_derive`` makes of that table, at
        a fraction of its cost (no table built); the propose memo starts empty."""
        t = self.table
        packed = current.packed.copy()
        start = PACK_HEADER + t.costs.shape[0]  # after the header and the widths
        costs = packed[start:start + t.costs.size].view(np.float64).reshape(t.costs.shape)
        context_slice_nb(t.contexts, t.context_costs, c, costs)  # written in place, in the packed copy
        return _Calibrated(current.calibration, current.arrays._replace(costs=costs), current.cell_p, packed,
                           current.cum_priors, np.empty(0, dtype=np.int64), [], {}, current.tree_plans,
                           current.tree_shapes)

    def _install(self, state: _Calibrated):
        # One reference per reader: depths() reads _packed, propose() _memo_list, the rest
        # _state; each is complete on its own, so no reader needs a lock.
        self._state = state
        self._packed = state.packed
        self._memo_list = state.memo_list
        # The planning inputs at each context asked for (a table with a context axis), derived
        # from this calibration on first use; a new calibration starts a new cache. _last is the
        # last context asked for, checked before the cache: (context, its inputs, their propose
        # memo), one reference. The cache is swapped before _last is cleared, and _slot() and
        # _propose_slot() clear _last again when what they read is no longer current, so a slot from an
        # old calibration never outlives its swap.
        self._contexts = {}
        self._last = _NO_CONTEXT

    def _at(self, context) -> _Calibrated:
        """The planning inputs at ``context`` (docs/planner.md#context): the table's grid there,
        interpolated in context; the reference grid's inputs without a context or an axis."""
        if context is None:
            return self._state
        return self._slot(context)[1]

    def _slot(self, context) -> tuple:
        """``(context, inputs, propose memo)`` for a context that is not None, remembered as the
        last one asked for."""
        last = self._last
        exact = type(context) is float or type(context) is int  # a bool or an odd type is checked first
        if (context is last[0] or (exact and context == last[0])) and type(last[1]) is _Calibrated:
            return last
        cache = self._contexts
        state = cache.get(context) if exact else None
        if state is None:
            c = _checked_context(context)
            current = self._state
            if not self.table.contexts.size:
                state = current
            else:
                # propose answers at this context are filled as they are asked for.
                state = self._inputs_at(current, c)
                if len(cache) >= CONTEXT_CACHE:
                    cache.clear()
                cache[c] = state
            if not exact:  # only an immutable float or int is kept as asked: it is its own key
                context = c
        slot = (context, state, state.memo_map)
        self._last = slot
        if self._contexts is not cache:  # a new calibration came in meanwhile: drop the old slot
            self._last = _NO_CONTEXT
        return slot

    def _propose_slot(self, context) -> tuple:
        """The slot ``propose`` plans in at a context that is not the last one asked for: the
        derived inputs where some method asked at it before, else ``(c, inputs)``, the context
        and the reference grid's inputs (a context met for the first time: one kernel call per
        width, nothing derived), remembered as the last context asked for."""
        exact = type(context) is float or type(context) is int
        if not self.table.contexts.size or (exact and context in self._contexts):
            return self._slot(context)
        c = _checked_context(context)
        base = self._state
        slot = (context if exact else c, (c, base), {})
        self._last = slot
        if self._state is not base:  # a new calibration came in meanwhile: drop the slot
            self._last = _NO_CONTEXT
        return slot

    @property
    def calibration(self) -> AcceptanceCalibration:
        """The calibration in use."""
        return self._state.calibration

    @property
    def cum_priors(self) -> np.ndarray:
        """``float64[max_k + 1]``: ``cum_priors[k] = sum_{j<=k} prod_{t<=j} prior(t)``."""
        return self._state.cum_priors

    def update_calibration(self, cal: AcceptanceCalibration) -> None:
        """Plan with ``cal`` from now on (a refit of the same drafter, e.g. from live telemetry).

        Rebuilds only what depends on the calibration (cumulative priors, the ``propose`` memo,
        the bucket index and probability arrays) and swaps it in as one reference: calls running
        in other threads finish with the old calibration, later calls use the new one.

        Raises
        ------
        KeyMismatchError
            ``cal`` was fitted on another drafter (weights, vocabulary, quantization or context).
        """
        if not isinstance(cal, AcceptanceCalibration):
            raise PlanError(f"update_calibration needs an AcceptanceCalibration, got {type(cal).__name__}")
        mine = self._state.calibration.drafter
        problems = [f"drafter {f}: planner has {getattr(mine, f)!r}, new calibration has {getattr(cal.drafter, f)!r}"
                    for f in ("weights_sha256", "vocab", "quantization", "context")
                    if getattr(mine, f) != getattr(cal.drafter, f)]
        if problems:
            raise KeyMismatchError("the new calibration was fitted on another drafter", problems)
        with self._update_lock:
            self._install(self._derive(cal))

    # -- before drafting ------------------------------------------------------------------
    def propose(self, n: int, context=None) -> int:
        """Draft depth for a batch of width ``n`` (docs/planner.md), at ``context`` (mean KV
        tokens per decoding sequence) on a table with a context axis."""
        if context is None:
            if type(n) is int and n >= 0:
                try:
                    return self._memo_list[n]
                except IndexError:
                    pass
            return self._propose_on(n, self._state)
        # The steady state (the context object last asked for, a width already answered at it)
        # is one slot read and one lookup, as without a context; the slot is one reference, and
        # its memo holds only widths in range, so a negative width falls through to the refusal.
        last = self._last
        if context is last[0] and type(n) is int:
            try:
                return last[2][n]
            except KeyError:
                pass
        return self._propose_at(n, context)

    def _propose_on(self, n, st) -> int:
        """``propose`` past its memo: the width checked, then planned on ``st``: the reference
        grid or a context's derived inputs, or ``(c, inputs)`` (a context met for the first
        time: a serve's context moves every step), planned on the grid there in one call, what
        planning on ``at_context(c)`` gives."""
        if not (type(n) is int and 0 <= n <= self.max_seqs):
            n = count_arg(n, "n")
            if n > self.max_seqs:
                return 0
        if type(st) is tuple:
            c, base = st
            t = self.table
            return int(propose_at_context_nb(base.arrays.widths, t.contexts, t.context_costs, c, base.cum_priors, n,
                                             self.slack, self.max_seqs))
        return int(propose_depth_nb(st.arrays.widths, st.arrays.costs, st.cum_priors, n, self.slack,
                                    self.max_seqs, np.empty((self.max_k + 1, 4))))

    def _propose_at(self, n, context) -> int:
        """``propose`` at a context that is not the object last asked for (an equal number
        counts as the same context), or at a width not yet answered there."""
        key, st, memo = self._last
        if context is not key and not ((type(context) is float or type(context) is int) and context == key):
            key, st, memo = self._propose_slot(context)
        if type(n) is int:
            try:
                return memo[n]
            except KeyError:
                pass
        depth = self._propose_on(n, st)
        n = int(n)  # checked by _propose_on
        if n < self._memo_size:
            memo[n] = depth
        return depth

    def propose_tree(self, n: int, *, context=None, max_nodes: int = 64, max_depth: int = 8) -> TreePlan:
        """What to draft at width ``n``: plain decoding, a chain or a branching draft tree
        (docs/planner.md#draft-trees), by the propose rule, at ``context`` on a table with a
        context axis.

        Candidates, in order: plain (k = 0); chains k = 1..min(max_k, max_depth), counted from
        the calibration's position priors and priced as :meth:`propose` prices them; then the
        calibration's branching best trees of 2..min(max_nodes, max_k) nodes and depth at most
        ``max_depth`` (its ``rank_acceptance``), priced by ``specsim.tree.tree_step_cost``.
        The kept candidate has the most tokens per joule among those at least ``(1 - slack)``
        times as fast as the depth-1 chain; a later one replaces it only with strictly more.
        Without a rank-acceptance table the answer is the chain ``propose`` picks (with
        ``max_depth >= max_k``). Answers are remembered per (n, context, max_nodes, max_depth).
        Safe from any number of threads.

        Parameters
        ----------
        n : int
            Batch width, >= 0; above ``max_seqs``, plain decoding.
        context : float, optional
            Mean KV tokens per decoding sequence.
        max_nodes : int
            1..256: the most draft nodes of a tree.
        max_depth : int
            1..64: the deepest chain or tree.

        Raises
        ------
        PlanError
            Naming the argument (a ``TreeError`` for ``max_nodes`` and ``max_depth``).
        """
        if (type(n) is int and type(max_nodes) is int and type(max_depth) is int
                and (context is None or type(context) is float or type(context) is int)):
            plan = self._state.tree_plans.get((n, context, max_nodes, max_depth))
            if plan is not None:
                return plan
        return self._propose_tree(n, context, max_nodes, max_depth)

    def _propose_tree(self, n, context, max_nodes, max_depth) -> TreePlan:
        n = count_arg(n, "n")
        for value, name, high, why in ((max_nodes, "max_nodes", MAX_TREE_NODES, "the most nodes a tree may hold"),
                                       (max_depth, "max_depth", MAX_TREE_DEPTH, "the deepest a tree may go")):
            problem = int_problem(value, name, 1, high, why)
            if problem:
                raise TreeError(problem)
        st = self._at(context)  # checks the context
        key = (n, context if context is None else _checked_context(context), int(max_nodes), int(max_depth))
        plan = st.tree_plans.get(key)
        if plan is not None:  # asked before in another spelling (a NumPy width or context)
            return plan
        a = st.calibration.rank_acceptance
        shapes = st.tree_shapes.get(key[3])
        if shapes is None:
            shapes = tree_shapes(a, self.max_k, key[3])
            st.tree_shapes[key[3]] = shapes
        notes = []
        if a is None:
            notes.append(NO_TREE_TABLE)
        elif key[2] > self.max_k:
            notes.append(f"nodes limited to the table's deepest verify, k = {self.max_k}")
        plan = choose_tree(st.arrays, st.cum_priors, n, self.slack, self.max_seqs, key[2:], shapes,
                           self.tree_attention_factor, notes)
        memo = st.tree_plans
        if len(memo) >= TREE_MEMO:
            memo.clear()
        memo[key] = plan
        if type(context) is float or type(context) is int or context is None:
            memo[(n, context, key[2], key[3])] = plan  # as asked, for the fast path
        return plan

    def propose_many(self, ns, out=None, context=None):
        """Depths for an array of widths in one call.

        Parameters
        ----------
        ns : ndarray(int64, ndim=1), shape (N,)
            Widths, >= 0.
        out : ndarray(int64, ndim=1), shape (N,), optional
            Filled in place when given.
        context : float, optional
            Mean KV tokens per decoding sequence (a table with a context axis).
        """
        ns = counts_arg(ns, len(ns) if np.ndim(ns) == 1 else -1, "widths")
        out = np.empty(ns.shape[0], dtype=np.int64) if out is None else out_arg(out, ns.shape[0], {"widths": ns})
        st = self._at(context)
        propose_many_nb(st.memo, st.arrays.widths, st.arrays.costs, st.cum_priors, self.slack, self.max_seqs, ns, out,
                        np.empty((self.max_k + 1, 4)))
        return out

    def goodput(self, n: int, context=None) -> int:
        """The depth with the most expected tokens per ms at width ``n`` (energy ignored), at
        ``context`` on a table with a context axis."""
        st = self._at(context)
        n = count_arg(n, "n")
        if n > self.max_seqs:
            return 0
        return int(goodput_depth_nb(st.arrays.widths, st.arrays.costs, st.cum_priors, n, self.max_seqs,
                                    np.empty((self.max_k + 1, 4))))

    def explain(self, n: int, context=None) -> ProposeExplanation:
        """The figures behind :meth:`propose` at width ``n`` (and ``context``): per depth the
        expected tokens, the step's ms and J, tokens/s, tokens/J, whether it is fast enough, and
        which one is chosen."""
        st = self._at(context)
        n = count_arg(n, "n")
        return explain_propose(st.arrays, st.cum_priors, n, self.slack, self.max_seqs, self.propose(n, context))

    # -- after drafting -------------------------------------------------------------------
    def _workspace(self, n):
        """This thread's workspace buffer (``_types.workspace_buffer``), grown to hold ``n``
        sequences."""
        rows = getattr(self._local, "rows", 0)
        if rows < n or rows == 0:
            rows = max(n, FIRST_ROWS, 2 * rows)
            self._local.work = workspace_buffer(rows, self.max_k)
            self._local.rows = rows
        return self._local.work

    def depths(self, confidences, n_conf, known_drafts, k_max, row_budget, out=None, *, check=True, context=None):
        """Drafts to verify per sequence (docs/planner.md). Safe from any number of threads.

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (n, m)
            Top-1 log-probabilities; NaN = unmeasured. Other real dtypes, layouts and nested
            lists are converted (a copy).
        n_conf : ndarray(int64, ndim=1), shape (n,)
            How many entries of each row are real, ``0 <= n_conf[i] <= m``.
        known_drafts : ndarray(int64, ndim=1), shape (n,)
            Drafts each sequence has, >= 0.
        k_max, row_budget : int
            Deepest verify depth and most draft rows in the batch, >= 0; values past 2**63 - 1
            mean no bound.
        out : ndarray(int64, ndim=1), shape (n,), optional
            Filled in place; nothing is allocated when it is given. C-contiguous, writable, and
            sharing no memory with the inputs.
        check : bool
            With False the per-sequence range check of ``n_conf`` and ``known_drafts`` is
            skipped (out-of-range values are then clamped, not refused); every other check
            stays. For callers that build their arrays once and keep them valid.
        context : float, optional
            Mean KV tokens per decoding sequence: on a table with a context axis the step costs
            are the grid at that context (docs/tables.md#context). Default: the reference grid.

        Returns
        -------
        ndarray(int64, ndim=1), shape (n,)
            ``out``.

        Raises
        ------
        PlanError
            Naming the argument and the value, for any input outside the above.
        """
        # Fast path: the kernel accepts only the exact types (anything else fails dispatch) and
        # checks shapes, ranges and aliasing itself; any refusal is redone through every check.
        # The loaded kernel is read from the module's list (a property call costs more).
        packed = self._packed if context is None else self._at(context).packed
        if type(k_max) is int and type(row_budget) is int:
            try:
                if out is None:
                    out = np.empty(confidences.shape[0], dtype=np.int64)
                kernel = _KERNEL[0] if _KERNEL else self._kernel
                rows = kernel(packed, self.slack, confidences, n_conf, known_drafts, k_max, row_budget, out,
                              self._local.work, check)
            except (AttributeError, TypeError, ValueError, OverflowError, IndexError):
                rows = -1
            if rows >= 0:
                return out
        return self._depths_checked(confidences, n_conf, known_drafts, k_max, row_budget, out, check, packed)

    def _depths_checked(self, confidences, n_conf, known_drafts, k_max, row_budget, out, check, packed):
        conf = confidences_arg(confidences)
        n, m = conf.shape
        n_conf_a = counts_arg(n_conf, n, "n_conf", upper=m)
        known = counts_arg(known_drafts, n, "known_drafts")
        k_max = cap_arg(k_max, "k_max")
        row_budget = cap_arg(row_budget, "row_budget")
        if check:
            _refuse_positive_confidences(conf, n_conf_a)
        if out is None:
            out = np.empty(n, dtype=np.int64)
        else:
            out_arg(out, n, {"confidences": confidences, "n_conf": n_conf, "known_drafts": known_drafts,
                             "the converted confidences": conf, "the converted n_conf": n_conf_a,
                             "the converted known_drafts": known})
        rows = self._kernel(packed, self.slack, conf, n_conf_a, known, k_max, row_budget, out,
                            self._workspace(n), True)
        if rows < 0:  # every refusal of the kernel is also one of the checks above
            raise PlanError(f"internal: the planner kernel refused checked inputs (code {rows})")
        return out

    def depths_many(self, confidences, n_conf, known_drafts, offsets, k_max, row_budget, out=None, context=None):
        """:meth:`depths` for many batches laid end to end in one call.

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (R, m)
            The rows of every batch, batch after batch.
        n_conf, known_drafts : ndarray(int64, ndim=1), shape (R,)
        offsets : ndarray(int64, ndim=1), shape (B + 1,)
            Batch ``b`` is rows ``offsets[b]:offsets[b + 1]``.
        k_max, row_budget : int or ndarray(int64, ndim=1), shape (B,)
            >= 0; values past 2**63 - 1 mean no bound.
        out : ndarray(int64, ndim=1), shape (R,), optional
        """
        conf = confidences_arg(confidences)
        rows, m = conf.shape
        n_conf_a = counts_arg(n_conf, rows, "n_conf", upper=m)
        known = counts_arg(known_drafts, rows, "known_drafts")
        _refuse_positive_confidences(conf, n_conf_a)
        offsets = np.asarray(offsets)
        if (offsets.ndim != 1 or offsets.dtype.kind not in "iu" or offsets.shape[0] < 1 or offsets[0] != 0
                or offsets[-1] != rows or (np.diff(offsets.astype(np.int64)) < 0).any()):
            raise PlanError(f"offsets must rise from 0 to {rows} (the number of rows), got {offsets.tolist()[:8]}")
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        batches = offsets.shape[0] - 1
        k_max = self._caps(k_max, batches, "k_max")
        row_budget = self._caps(row_budget, batches, "row_budget")
        if out is None:
            out = np.empty(rows, dtype=np.int64)
        else:
            out_arg(out, rows, {"confidences": confidences, "n_conf": n_conf, "known_drafts": known_drafts,
                                "offsets": offsets, "the converted confidences": conf})
        widest = int(np.diff(offsets).max()) if batches else 0

        st = self._at(context)
        sequence_depths_many_nb(st.arrays, st.cell_p, conf, n_conf_a, known, offsets, k_max, row_budget, self.slack,
                                out, workspace_views_nb(self._workspace(widest), self.max_k))
        return out

    @staticmethod
    def _caps(value, batches, name):
        if np.ndim(value) == 0:
            return np.full(batches, cap_arg(value if not isinstance(value, np.ndarray) else value.item(), name),
                           dtype=np.int64)
        return counts_arg(value, batches, name)


@dataclass(frozen=True)
class SpecCostState:
    """A table, its drafter's calibration and the slack, as a serve loads and checks them."""

    table: CostTable
    calibration: AcceptanceCalibration
    slack: float

    @classmethod
    def load(cls, table_path, calibration_path, serve_key: TableKey, drafter_key: DrafterKey, slack: float):
        """Load both files and refuse, listing every mismatch, unless the table's key checks
        clean against ``serve_key``, the calibration's drafter equals ``drafter_key`` and
        ``0 <= slack < 1``."""
        for name, value, kind in (("serve_key", serve_key, TableKey), ("drafter_key", drafter_key, DrafterKey)):
            if not isinstance(value, kind):
                swapped = " (serve_key and drafter_key swapped?)" if isinstance(value, (TableKey, DrafterKey)) else ""
                raise KeyMismatchError(f"{name} must be a {kind.__name__}, got {show(value)}{swapped}")
        table = CostTable.load(table_path)
        cal = AcceptanceCalibration.load(calibration_path)
        problems = [f"table {table_path}: {m}" for m in table.key.check(serve_key)]
        if cal.drafter.synthetic:
            problems.append(f"calibration {calibration_path} is a what-if calibration (a synthetic drafter key, from "
                            "rates asked about): a serve plans with one fitted on its own drafter's outcomes")
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


