"""The planner's tables by width: what a policy drafts at each batch width 0..max_num_seqs, as the
server clamps it (the simulator memoises it per run; ``specsim tune`` starts from it), and a cost
table's costs at every width as the simulated server reads them (:func:`engine_table`).

Parameters shared by the functions here: ``policy`` a :class:`specsim.policy.Policy`, ``table`` a
:class:`specsim.CostTable`, ``cal`` an :class:`specsim.AcceptanceCalibration`, ``opts`` the server
options (:class:`specsim.ServerOptions`, or the simulator's resolved ones: ``max_seqs``, ``slack``,
``row_budget``).
"""

from __future__ import annotations

import numpy as np

from specsim._checks import NO_CAP
from specsim.plan._kernels import (
    above_idle_table_nb, cum_priors_nb, goodput_table_nb, propose_table_nb, width_costs_nb,
)
from specsim.plan._types import table_arrays


def depth_by_width(policy, table, cal, opts, max_num_seqs: int, k_cap: int, idle_w: float = None) -> np.ndarray:
    """The policy's draft depth at every width 0..max_num_seqs, clamped as the server clamps it.

    ``propose``, ``sequence`` and ``load-aware`` use the planner's batch-depth kernel, ``goodput`` its own;
    the speculation cap applies to every policy; uniform policies are also held to ``row_budget // n`` rows.
    With ``idle_w`` (watts): the depths ``load-aware`` runs while no request waits, planned by
    tokens per joule above that idle power (other policies ignore it).
    """
    cap = NO_CAP if opts.max_seqs is None else opts.max_seqs
    out = np.empty(max_num_seqs + 1, dtype=np.int64)
    scratch = np.empty((table.max_k + 1, 4))
    if policy.needs_planner:
        cum = cumulative_priors(cal, table.max_k)
        widths, costs = table_arrays(table)
        if policy.maximises_goodput:
            goodput_table_nb(widths, costs, cum, cap, out, scratch)
        elif idle_w is not None and policy.counts_idle:
            above_idle_table_nb(widths, costs, cum, opts.slack, cap, float(idle_w), out, scratch)
        else:
            propose_table_nb(widths, costs, cum, opts.slack, cap, out, scratch)
    elif policy.kind == "sglang-adaptive":
        out[:] = k_cap  # the controller's candidate is held to what the caps below leave at each width
    else:
        out[:] = [policy.depth_for_width(n) for n in range(max_num_seqs + 1)]
    np.minimum(out, k_cap, out=out)
    widths = np.arange(max_num_seqs + 1)
    out[widths > cap] = 0
    if not policy.per_sequence and opts.row_budget is not None:
        per_width = opts.row_budget // np.maximum(widths, 1)
        np.minimum(out, per_width, out=out)
    out[0] = 0
    return np.ascontiguousarray(out)


def cumulative_priors(cal, max_k: int) -> np.ndarray:
    """``float64[max_k + 1]``: the expected accepted drafts of a chain of each depth 0..max_k under
    the calibration's position priors (the planner's ``cum_priors``)."""
    out = np.empty(max_k + 1)
    cum_priors_nb(cal.priors, max_k, out)
    return out


def engine_table(table, max_num_seqs: int, context_pricing: bool) -> tuple:
    """The table as the simulated server reads it, the fields of its ``TableArrays`` bundle
    (:mod:`specsim.sim.bundles`): ``(widths, costs, wcs, contexts, cwcs)``, the widths and costs
    as writable copies (:func:`~specsim.table.cost_table.table_arrays` says why), ``wcs`` the
    costs interpolated at every width 0..max_num_seqs and, with ``context_pricing`` on a table
    with a context axis, ``contexts`` (a writable int64 copy; else empty, so a table with an axis
    and one without run one compiled engine) and ``cwcs``, ``wcs`` at each measured context."""
    widths, costs = table_arrays(table)
    priced = table.contexts.size and context_pricing
    contexts = np.array(table.contexts if priced else np.zeros(0, np.int64), dtype=np.int64)
    context_costs = np.array(table.context_costs)
    wcs = np.empty((max_num_seqs + 1, table.max_k + 1, 4))
    for n in range(max_num_seqs + 1):
        width_costs_nb(widths, costs, n, wcs[n])
    cwcs = np.empty((contexts.shape[0], max_num_seqs + 1, table.max_k + 1, 4))
    for c in range(contexts.shape[0]):
        for n in range(max_num_seqs + 1):
            width_costs_nb(widths, context_costs[c], n, cwcs[c, n])
    return widths, costs, wcs, contexts, cwcs
