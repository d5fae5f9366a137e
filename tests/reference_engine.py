"""A plain, slow, obviously-correct serving engine for tests to compare the Numba engine with,
step for step: the draws, the prefill cost, and the scheduling rules of docs/simulation.md."""

from __future__ import annotations

import math

import numpy as np

from tests.reference import (
    plan_ref_cell, ref_goodput_depth, ref_greedy_order, ref_level_sizes, ref_occupancy_bucket, ref_propose_depth,
    ref_propose_tree, ref_sequence_depths, ref_tree_price,
)

TREE_FACTOR = 1.10  # specsim.tree.TREE_ATTENTION_FACTOR, as docs/planner.md#pricing states it

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def ref_mix64(z):
    """splitmix64's finaliser on a Python int, wrapping at 64 bits."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def ref_uniform(seed, request, token, position, stream):
    """The engine's draw: splitmix64 over (seed, request), then over (token << 8 | position);
    stream 0 is the high 32 bits of that hash, stream 1 the low 32 bits."""
    key = ref_mix64(seed + _GOLDEN)
    rkey = ref_mix64(key ^ ((request * 0xD6E8FEB86659FD93) & _MASK64))
    h = ref_mix64(rkey ^ ((((token << 8) | position) * 0xA0761D6478BD642F) & _MASK64))
    half = h >> 32 if stream == 0 else h & 0xFFFFFFFF
    return half / 2.0 ** 32


def ref_trace_entry(seed, request, token, length):
    """The acceptance-trace entry of a step state: the draft hash at position 0, top 53 bits, mod L."""
    key = ref_mix64(seed + _GOLDEN)
    rkey = ref_mix64(key ^ ((request * 0xD6E8FEB86659FD93) & _MASK64))
    h = ref_mix64(rkey ^ (((token << 8) * 0xA0761D6478BD642F) & _MASK64))
    return (h >> 11) % length


def ref_draft_bucket(occ_cdf, seed, request, token, position):
    """Bucket of a draft: the first whose cumulative weight exceeds the stream-0 draw."""
    return ref_occupancy_bucket(occ_cdf, ref_uniform(seed, request, token, position, 0), position)


def ref_request_z(seed, request):
    """A request's spread factor: Box-Muller on the hash of (seed, request, token 2**40, position 0),
    the high 32 bits (plus a half step) as u1 in (0, 1), the low 32 bits as u2 in [0, 1)."""
    key = ref_mix64(seed + _GOLDEN)
    rkey = ref_mix64(key ^ ((request * 0xD6E8FEB86659FD93) & _MASK64))
    h = ref_mix64(rkey ^ ((((1 << 40) << 8) * 0xA0761D6478BD642F) & _MASK64))
    u1 = ((h >> 32) + 0.5) / 2.0 ** 32
    u2 = (h & 0xFFFFFFFF) / 2.0 ** 32
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def ref_draft_accepted(occ_cdf, p_accept, seed, request, token, position, centre=None, shift=0.0):
    """A draft's verdict: the stream-1 draw below its bucket's ``p_accept`` or, with a spread,
    below ``1 / (1 + exp(-(centre[bucket] + shift)))`` (``shift``: the request's sd * z)."""
    b = ref_draft_bucket(occ_cdf, seed, request, token, position)
    p = p_accept[b] if centre is None else 1.0 / (1.0 + math.exp(-(centre[b] + shift)))
    return ref_uniform(seed, request, token, position, 1) < p


def ref_prefill_cost(tokens, ms_per_token, j_per_token, ms_per_step=0.0, j_per_step=0.0, curve=None):
    """(ms, J) of one step's prefill of ``tokens`` tokens: affine (the fixed part only when
    something is prefilled) or the curve (flat below its first point, linear between points,
    the last segment's slope beyond)."""
    if curve is None:
        if tokens == 0:
            return ms_per_token * tokens, j_per_token * tokens
        return ms_per_step + ms_per_token * tokens, j_per_step + j_per_token * tokens
    if tokens == 0:
        return 0.0, 0.0
    xs, ms, js = curve
    if len(xs) == 1 or tokens <= xs[0]:
        return ms[0], js[0]
    hi = next((i for i in range(1, len(xs) - 1) if xs[i] >= tokens), len(xs) - 1)
    f = (tokens - xs[hi - 1]) / (xs[hi] - xs[hi - 1])
    return ms[hi - 1] + (ms[hi] - ms[hi - 1]) * f, js[hi - 1] + (js[hi] - js[hi - 1]) * f


def ref_prefill_fixed(ms_per_step, j_per_step, curve):
    """(ms, J) every prefilling step pays whatever its tokens: the affine model's per-step part,
    or the curve's first segment extrapolated to 0 tokens, kept within [0, first point]."""
    if curve is None:
        return ms_per_step, j_per_step
    xs, ms, js = curve
    if len(xs) == 1:
        return ms[0], js[0]
    out = []
    for y in (ms, js):
        at_zero = y[0] - (y[1] - y[0]) / (xs[1] - xs[0]) * xs[0]
        out.append(min(max(at_zero, 0.0), y[0]))
    return tuple(out)


class RefEngine:
    """The engine's rules (docs/simulation.md), one Python statement at a time, over lists.

    ``requests``: list of (arrival_s, prompt_tokens, output_tokens), sorted. ``policy``: ("fixed", K),
    ("schedule", [(lo, hi or None, k), ...]), ("propose",), ("goodput",), ("sequence",),
    ("sglang-adaptive", AdaptiveConfig, CUDA-graph sizes) or ("tree", N, D) (N = 0: ``tree:auto``),
    whose trees come from ``rank_acceptance`` (rows depths, columns ranks; with a spread,
    ``tree_centre`` holds each cell's centre).
    With ``digits`` (an acceptance trace's entries, clamped to ``k_logged``), draft outcomes come
    from the entry each step state picks, depths are capped at ``k_logged`` and the planner sees
    no confidences. With ``spread_sd`` > 0 and ``centre`` (each bucket's centre), request ``r``
    accepts a draft in bucket ``b`` with probability ``1 / (1 + exp(-(centre[b] + spread_sd * z_r)))``,
    ``z_r`` from :func:`ref_request_z`.
    """

    def __init__(self, requests, widths, costs, edges, p_accept, priors, occ_cdf, policy, *, slack=0.0, max_batch=8,
                 max_seqs=None, k_max=None, row_budget=None, prefill_ms_per_token=0.0, prefill_j_per_token=0.0,
                 idle_w=0.0, seed=0, digits=None, k_logged=None, chunked_prefill=False, max_num_batched_tokens=None,
                 kv_capacity_tokens=None, kv_block_size=16, prefill_ms_per_step=0.0, prefill_j_per_step=0.0,
                 prefill_curve=None, mixed_step_pricing="additive", contexts=None, context_costs=None,
                 acceptance_window=None, acceptance_length_threshold=None, spread_sd=0.0, centre=None,
                 rank_acceptance=None, tree_centre=None):
        self.requests, self.widths, self.costs, self.edges = requests, widths, costs, edges
        self.p_accept, self.priors, self.occ_cdf, self.policy = p_accept, priors, occ_cdf, policy
        self.slack, self.max_batch, self.seed, self.digits, self.idle_w = slack, max_batch, seed, digits, idle_w
        # The per-request spread: each bucket's centre and each request's shift sd * z (none at sd 0).
        self.centre = centre if spread_sd and digits is None else None
        self.shift = [spread_sd * ref_request_z(seed, r) for r in range(len(requests))] if self.centre else None
        self.chunked, self.block_size = chunked_prefill, kv_block_size
        # Trees: the rank acceptance, its centres under the spread, and the step's tree
        # ``(parents, ranks, branching)`` (None: a chain or plain step).
        self.a = rank_acceptance
        self.tree_centre = tree_centre if spread_sd and digits is None else None
        self.step_tree = None
        self.one_pass = mixed_step_pricing == "one-pass"
        # Context pricing: the grid (``costs`` layout) at each measured context, ascending.
        self.contexts, self.context_costs = contexts, context_costs
        self.contexts_priced = []
        self.prefill = (prefill_ms_per_token, prefill_j_per_token, prefill_ms_per_step, prefill_j_per_step,
                        prefill_curve)
        self.max_k = len(costs[0]) - 1
        self.k_cap = self.max_k if k_max is None else min(k_max, self.max_k)
        if digits is not None:
            self.k_cap = min(self.k_cap, k_logged)
        inf = float("inf")
        self.cap = inf if max_seqs is None else max_seqs
        self.row_budget = inf if row_budget is None else row_budget
        self.tokens_per_step = inf if max_num_batched_tokens is None else max_num_batched_tokens
        self.kv_blocks = inf if kv_capacity_tokens is None else kv_capacity_tokens // kv_block_size
        count = len(requests)
        self.prompt = [q[1] for q in requests]
        self.output = [q[2] for q in requests]
        self.first, self.finish, self.sched = [math.nan] * count, [math.nan] * count, [math.nan] * count
        self.emitted, self.prefilled, self.blocks = [0] * count, [0] * count, [0] * count
        self.target = list(self.prompt)
        # The speculation gate: decode steps per request, the last ``window`` accepted lengths.
        self.gate_window = acceptance_window or 0
        self.gate_threshold = acceptance_length_threshold
        self.decode_iters = [0] * count
        self.gate_values, self.gate_off = [], False
        # SGLang's adaptive controller: one dict per slot, set up at the first decoding batch.
        self.controllers, self.controller_slot = None, None
        self.hist = [0] * (self.max_k + 1)
        self.tot = dict(decode_j=0.0, prefill_j=0.0, idle_j=0.0, decode_steps=0, prefill_steps=0, mixed_steps=0,
                        accepted=0, rows=0, sequence_steps=0, preemptions=0, drafts_cut=0, prefill_tokens=0,
                        resumed=0, kv_peak=0, kv_block_s=0.0)
        self.steps = []
        self.t = requests[0][0] if count else 0.0
        self.queue, self.running = [], []

    def run(self):
        """Run to the end; a dict of per-request lists, totals and ``steps``, one (end time,
        decoding width, verified rows / width, decode tokens, KV blocks, prefill tokens) per step
        with decoding sequences."""
        fed, count = 0, len(self.requests)
        while True:
            while fed < count and self.requests[fed][0] <= self.t:
                self.queue.append(fed)
                fed += 1
            if not self.running and not self.queue:
                if fed >= count:
                    break
                self.tot["idle_j"] += self.idle_w * (self.requests[fed][0] - self.t)
                self.t = self.requests[fed][0]
                continue
            self.step()
        mean_context = sum(self.contexts_priced) / self.tot["decode_steps"] if self.contexts_priced else 0.0
        return dict(first=self.first, finish=self.finish, sched=self.sched, emitted=self.emitted,
                    depth_histogram=self.hist, end_s=self.t, steps=self.steps, mean_decode_context=mean_context,
                    **self.tot)

    def bracket(self, c):
        """Indices of the measured contexts around ``c`` (the nearest twice outside them)."""
        xs = self.contexts
        below = [i for i, x in enumerate(xs) if x <= c]
        above = [i for i, x in enumerate(xs) if x >= c]
        return (below[-1] if below else above[0]), (above[0] if above else below[-1])

    def planning_grid(self, decoding):
        """(widths, costs) the planner reads: the table's, or with context pricing the step costs
        at this width and the decoding requests' mean context, as a one-width grid."""
        n = len(decoding)
        if not self.contexts or n == 0:
            return self.widths, self.costs
        c = sum(self.prompt[r] + self.emitted[r] - 1 for r in decoding) / n
        self.plan_context = c
        lo, hi = self.bracket(c)
        p = [plan_ref_cell(self.widths, self.context_costs[lo], n, k) for k in range(self.max_k + 1)]
        if lo == hi:
            return [n], [p]
        q = [plan_ref_cell(self.widths, self.context_costs[hi], n, k) for k in range(self.max_k + 1)]
        t = (c - self.contexts[lo]) / (self.contexts[hi] - self.contexts[lo])
        return [n], [[[a + (b - a) * t for a, b in zip(pk, qk)] for pk, qk in zip(p, q)]]

    def depth_at(self, n, grid=None):
        kind = self.policy[0]
        if n == 0:
            return 0
        widths, costs = grid if grid is not None else (self.widths, self.costs)
        if kind == "fixed":
            k = self.policy[1]
        elif kind == "schedule":
            k = next((d for lo, hi, d in self.policy[1] if lo <= n and (hi is None or n <= hi)), 0)
        elif kind == "sglang-adaptive":
            k = self.adaptive_depth(n)
        elif kind == "tree":
            k, shape = self.tree_plan(n, grid)
        elif kind == "goodput":
            k = ref_goodput_depth(widths, costs, self.priors, n, self.cap)
        elif kind == "load-aware" and not self.queue:
            # Nobody waits: the time a step saves would be spent idle, so energy counts above idle power.
            k = ref_propose_depth(widths, costs, self.priors, n, self.slack, self.cap, self.idle_w)
        else:
            k = ref_propose_depth(widths, costs, self.priors, n, self.slack, self.cap)
        k = min(k, self.k_cap)
        if self.gate_off:
            k = 0
        if n > self.cap:
            k = 0
        if kind != "sequence" and self.row_budget != float("inf"):
            k = min(k, int(self.row_budget) // n)
        if kind == "tree":
            self.step_tree = None
            if shape is not None and k > 0:
                parents, ranks = shape[0][:k], shape[1][:k]
                chain = all(r == 1 for r in ranks) and all(c == 1 for c in ref_level_sizes(parents))
                self.step_tree = (parents, ranks, not chain)
        return k

    def tree_plan(self, n, grid=None):
        """``(nodes, (parents, ranks) of the order they are a prefix of, or None for a chain)``:
        ``tree:N,D``'s best tree, or what propose_tree picks at width ``n`` on the reference grid
        (with context pricing: at the batch's mean context, the chains on ``grid`` and each tree
        at its step price there, linear between the measured contexts around it)."""
        nodes, depth = self.policy[1], self.policy[2]
        if nodes:
            parents, ranks, _ = ref_greedy_order(self.a, nodes, depth)
            return nodes, (parents, ranks)
        max_nodes = min(64, max(self.k_cap, 1))
        if self.tokens_per_step != float("inf"):
            max_nodes = min(max_nodes, max(int(self.tokens_per_step) - 1, 1))
        widths, costs, price = self.widths, self.costs, None
        if self.contexts and grid is not None:
            widths, costs = grid
            c = self.plan_context
            lo, hi = self.bracket(c)
            at = min(n, self.widths[-1])

            def live_price(parents, ranks):
                p = ref_tree_price(self.widths, self.context_costs[lo], at, parents, ranks, TREE_FACTOR)
                ms, j = p[0] + p[2], p[1] + p[3]
                if lo != hi:
                    q = ref_tree_price(self.widths, self.context_costs[hi], at, parents, ranks, TREE_FACTOR)
                    t = (c - self.contexts[lo]) / (self.contexts[hi] - self.contexts[lo])
                    ms += (q[0] + q[2] - ms) * t
                    j += (q[1] + q[3] - j) * t
                return ms, j

            price = live_price
        kind, parents, _ = ref_propose_tree(widths, costs, self.priors, self.a, n, self.slack, self.cap,
                                            max_nodes, 8, TREE_FACTOR, price)
        if kind != "tree":
            return len(parents), None
        order_p, order_r, _ = ref_greedy_order(self.a, min(self.max_k, 256), 8)
        return len(parents), (order_p, order_r)

    def adaptive_depth(self, n):
        """The current candidate of the slot SGLang serves a batch of ``n`` in: ``n`` padded up to
        the next CUDA-graph size, then the slot with the largest first width <= it."""
        cfg, graphs = self.policy[1], self.policy[2]
        if self.controllers is None:
            self.controllers = []
            start = max(c[-1] for _, c in cfg.slots)
            for _, cands in cfg.slots:
                cur = min(max(start, cands[0]), cands[-1])
                best = min(cands, key=lambda c: (abs(c - cur), -c))
                self.controllers.append({"cands": list(cands), "cur": best, "ema": best - 1, "count": 0})
        padded = next((g for g in graphs if g >= n), n)
        self.controller_slot = max([i for i, (lo, _) in enumerate(cfg.slots) if lo <= padded] or [0])
        return self.controllers[self.controller_slot]["cur"]

    def adapt(self, mean_accepted):
        """SGLang's AdaptiveStepSlot after a verify batch, as its public code does it."""
        cfg = self.policy[1]
        c = self.controllers[self.controller_slot]
        c["ema"] = (1 - cfg.ema_alpha) * c["ema"] + cfg.ema_alpha * mean_accepted
        c["count"] += 1
        if c["count"] <= cfg.warmup_batches or (c["count"] - cfg.warmup_batches) % cfg.update_interval != 0:
            return
        cands = c["cands"]
        i = cands.index(c["cur"])
        while i > 0 and c["ema"] <= cands[i - 1] - 0.5 + cfg.down_hysteresis:
            i -= 1
        while i < len(cands) - 1 and c["ema"] > cands[i] - 0.5 + cfg.up_hysteresis:
            i += 1
        c["cur"] = cands[i]

    def used(self):
        return sum(self.blocks[r] for r in self.running)

    def grow(self, r, tokens):
        return max(-(-tokens // self.block_size) - self.blocks[r], 0)

    def preempt_last(self):
        r = self.running.pop()
        self.blocks[r] = 0
        self.prefilled[r] = 0
        self.target[r] = self.prompt[r] + self.emitted[r]
        self.queue.insert(0, r)
        self.tot["preemptions"] += 1
        return r

    def admit(self, take, budget, whole):
        """Admit from the head of the queue; returns (budget left, anyone admitted)."""
        got = False
        while self.queue and len(self.running) < self.max_batch and (budget > 0 or whole):
            r = self.queue[0]
            left = self.target[r] - self.prefilled[r]
            if whole and got and left > budget:
                break
            chunk = left if whole else min(left, budget)
            grow = self.grow(r, self.prefilled[r] + chunk)
            if grow > self.kv_blocks - self.used():
                break
            self.queue.pop(0)
            self.blocks[r] += grow
            if math.isnan(self.sched[r]):
                self.sched[r] = self.t
            self.running.append(r)
            take[r] = chunk
            budget -= chunk
            got = True
        return budget, got

    def plan(self, decoding):
        """Verify and drafted depths of the decoding sequences, and the drafted depth k."""
        grid = self.planning_grid(decoding)
        k = self.depth_at(len(decoding), grid)
        if self.policy[0] != "sequence":
            return {r: k for r in decoding}, k
        drafts = [min(k, self.output[r] - self.emitted[r] - 1) for r in decoding]
        kd = max(drafts, default=0)
        if self.digits is None:
            confs = [[float(np.float32(self.edges[ref_draft_bucket(self.occ_cdf, self.seed, r,
                                                                   self.emitted[r] + j - 1, j)]))
                      for j in range(1, d + 1)] for r, d in zip(decoding, drafts)]
        else:
            confs = [[] for _ in decoding]
        vs = [0] * len(decoding)
        if kd > 0:
            rb = self.row_budget if self.row_budget != float("inf") else 1 << 62
            vs = ref_sequence_depths(grid[0], grid[1], self.edges, self.p_accept, self.priors, confs, drafts,
                                     kd, rb, self.slack)
        return dict(zip(decoding, vs)), kd

    def schedule_running(self, verify, take, budget):
        """Running requests in admission order; returns (budget left, anything preempted)."""
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            if r in verify:
                want = 1 + verify[r]
                chunk = min(want, budget)
                tokens = self.prompt[r] + self.emitted[r] + chunk - 1
            else:
                chunk = min(self.target[r] - self.prefilled[r], budget)
                tokens = self.prefilled[r] + chunk
            grow = self.grow(r, tokens)
            while grow > self.kv_blocks - self.used():
                preempted = True
                if self.preempt_last() == r:
                    return budget, preempted
            self.blocks[r] += grow
            if r in verify:
                verify[r] = chunk - 1
                self.tot["drafts_cut"] += want - chunk
            take[r] = chunk
            budget -= chunk
            i += 1
        return budget, preempted

    def decode_price(self, costs, ns, rows, k, uniform):
        """(ms, J) of the decode part over the grid ``costs``: the cell, or the row cost (a
        branching tree: its price, or the cut rows' verify times the factor plus its drafting)."""
        if self.step_tree is not None and self.step_tree[2]:
            parents, ranks, _ = self.step_tree
            vms, vj, dms, dj = ref_tree_price(self.widths, costs, ns, parents, ranks, TREE_FACTOR)
            if uniform:
                return vms + dms, vj + dj
            d = rows / ns
            lo, hi = min(math.floor(d), self.max_k), min(math.ceil(d), self.max_k)
            f = d - math.floor(d)
            c_lo = plan_ref_cell(self.widths, costs, ns, lo)
            c_hi = plan_ref_cell(self.widths, costs, ns, hi)
            return ((c_lo[0] + (c_hi[0] - c_lo[0]) * f) * TREE_FACTOR + dms,
                    (c_lo[1] + (c_hi[1] - c_lo[1]) * f) * TREE_FACTOR + dj)
        if uniform:
            c = plan_ref_cell(self.widths, costs, ns, k)
            return c[0] + c[2], c[1] + c[3]
        d = rows / ns
        lo, hi = min(math.floor(d), self.max_k), min(math.ceil(d), self.max_k)
        f = d - math.floor(d)
        c_lo = plan_ref_cell(self.widths, costs, ns, lo)
        c_hi = plan_ref_cell(self.widths, costs, ns, hi)
        c_k = plan_ref_cell(self.widths, costs, ns, k)
        return c_lo[0] + (c_hi[0] - c_lo[0]) * f + c_k[2], c_lo[1] + (c_hi[1] - c_lo[1]) * f + c_k[3]

    def price(self, dec, pre, verify, take, n, k):
        """(ms, decode J, prefill J) of the step: the decode part plus the prefill part, less
        (one forward pass) the share ``min(decode, prefill, prefill's fixed part)``."""
        ns, rows = len(dec), sum(verify[r] for r in dec)
        ptok = sum(take[r] for r in pre)
        dms = dj = 0.0
        if ns:
            uniform = self.policy[0] != "sequence" and ns == n and rows == n * k
            if not self.contexts:
                dms, dj = self.decode_price(self.costs, ns, rows, k, uniform)
            else:
                # The mean KV tokens of the running requests that decode, recomputed here.
                decoding = [r for r in self.running if self.emitted[r] > 0 and self.prefilled[r] >= self.target[r]]
                c = sum(self.prompt[r] + self.emitted[r] - 1 for r in decoding) / len(decoding)
                self.contexts_priced.append(c)
                xs = self.contexts
                lo, hi = self.bracket(c)
                dms, dj = self.decode_price(self.context_costs[lo], ns, rows, k, uniform)
                if lo != hi:
                    t = (c - xs[lo]) / (xs[hi] - xs[lo])
                    hms, hj = self.decode_price(self.context_costs[hi], ns, rows, k, uniform)
                    dms, dj = dms + (hms - dms) * t, dj + (hj - dj) * t
            self.tot["decode_steps"] += 1
            self.tot["rows"] += rows
            self.tot["sequence_steps"] += ns
        pms = pj = 0.0
        if pre:
            pms, pj = ref_prefill_cost(ptok, *self.prefill)
            if ns and self.one_pass:
                fms, fj = ref_prefill_fixed(*self.prefill[2:])
                if self.prefill[4] is not None:  # a curve's fixed part: at most the plain step at the narrowest width
                    fms, fj = min(fms, self.costs[0][0][0]), min(fj, self.costs[0][0][1])
                pms -= min(dms, pms, fms)
                pj -= min(dj, pj, fj)
            self.tot["prefill_steps"] += 1
            self.tot["prefill_tokens"] += ptok
            self.tot["mixed_steps"] += 1 if ns else 0
        return dms + pms, dj, pj

    def emit(self, dec, pre, verify, take):
        """Tokens of the step that just ended; returns the decode tokens."""
        tokens = 0
        for r in dec:
            v, e = verify[r], self.emitted[r]
            self.hist[v] += 1
            acc = 0
            if self.step_tree is not None and v > 0:
                acc = self.tree_walk(r, e, v)
                self.emitted[r] = e + 1 + acc
                self.decode_iters[r] += 1
                tokens += 1 + acc
                self.tot["accepted"] += acc
                continue
            for j in range(1, min(v, self.output[r] - e - 1) + 1):
                if self.digits is not None:
                    if j > self.digits[ref_trace_entry(self.seed, r, e, len(self.digits))]:
                        break
                elif not ref_draft_accepted(self.occ_cdf, self.p_accept, self.seed, r, e + j - 1, j, self.centre,
                                            self.shift[r] if self.shift else 0.0):
                    break
                acc += 1
            self.emitted[r] = e + 1 + acc
            self.decode_iters[r] += 1
            tokens += 1 + acc
            self.tot["accepted"] += acc
        for r in pre:
            self.prefilled[r] += take[r]
            if self.prefilled[r] == self.target[r]:
                if self.emitted[r] == 0:
                    self.first[r] = self.t
                else:
                    self.tot["resumed"] += 1
                self.emitted[r] += 1
        return tokens

    def tree_walk(self, r, e, v):
        """Drafts of request ``r`` (``e`` tokens emitted) accepted from the step's tree cut to its
        first ``v`` nodes: at each depth the target's rank drawn from the rank-acceptance row
        (with the chain's stream-1 draw there), the walk going on while the tree has that child."""
        parents, ranks, _ = self.step_tree
        node, acc = -1, 0
        while acc < self.output[r] - e - 1 and acc < len(self.a):
            u = ref_uniform(self.seed, r, e + acc, acc + 1, 1)
            if self.tree_centre is None:
                row = list(self.a[acc])
            else:
                row = [1.0 / (1.0 + math.exp(-(c + self.shift[r]))) for c in self.tree_centre[acc]]
                total = 0.0
                for p in row:
                    total += p
                scale = 1.0 / total if total > 1.0 else 1.0
                row = [p * scale for p in row]
            cum, rank = 0.0, None
            for q, p in enumerate(row):
                cum += p
                if u < cum:
                    rank = q + 1
                    break
            if rank is None:
                break
            child = next((i for i in range(v) if parents[i] == node and ranks[i] == rank), None)
            if child is None:
                break
            node, acc = child, acc + 1
        return acc

    def step(self):
        decoding = [r for r in self.running if self.emitted[r] > 0 and self.prefilled[r] >= self.target[r]]
        take, verify, k = {}, {}, 0
        budget = self.tokens_per_step
        separate = not self.chunked and self.admit(take, budget, True)[1]
        if not separate:
            verify, k = self.plan(decoding)
            budget, preempted = self.schedule_running(verify, take, budget)
            if self.chunked and not preempted:
                self.admit(take, budget, False)
        dec = [r for r in self.running if r in verify and r in take]
        pre = [r for r in self.running if r not in verify and r in take]
        ms, dj, pj = self.price(dec, pre, verify, take, len(decoding), k)
        self.tot["kv_peak"] = max(self.tot["kv_peak"], self.used())
        self.t = self.t + ms / 1000.0
        self.tot["decode_j"] += dj
        self.tot["prefill_j"] += pj
        self.tot["kv_block_s"] += self.used() * (ms / 1000.0)
        accepted_before = self.tot["accepted"]
        tokens = self.emit(dec, pre, verify, take)
        if self.policy[0] == "sglang-adaptive" and dec and k > 0:
            self.adapt((self.tot["accepted"] - accepted_before) / len(dec))
        if dec:
            rows = sum(verify[r] for r in dec)
            self.steps.append((self.t, len(dec), rows / len(dec), tokens, self.used(),
                               sum(take[r] for r in pre)))
        for r in dec + pre:
            if self.emitted[r] == self.output[r]:
                self.finish[r] = self.t
                self.blocks[r] = 0
        for r in self.running:  # the gate sees finished requests in admission order
            if r in take and self.emitted[r] == self.output[r]:
                self.gate(r)
        self.running = [r for r in self.running if self.emitted[r] < self.output[r]]


    def gate(self, r):
        """TensorRT-LLM's acceptance window: the finished request's mean accepted drafts per
        decode step joins the last ``window``; a full window whose mean is below the threshold
        turns speculation off for good. Requests that never decoded are not counted."""
        if self.gate_window <= 0 or self.gate_off or self.decode_iters[r] == 0:
            return
        self.gate_values.append(max(0.0, self.output[r] / self.decode_iters[r] - 1.0))
        if len(self.gate_values) > self.gate_window:
            self.gate_values.pop(0)
        if len(self.gate_values) == self.gate_window:
            total = 0.0
            for v in self.gate_values:
                total += v
            self.gate_off = total / self.gate_window < self.gate_threshold


def ref_simulate(requests, widths, costs, edges, p_accept, priors, occ_cdf, policy, **options):
    """Run :class:`RefEngine` on ``requests`` (options as its keywords) and return its dict."""
    return RefEngine(requests, widths, costs, edges, p_accept, priors, occ_cdf, policy, **options).run()
