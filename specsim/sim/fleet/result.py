"""What a fleet did: the fleet as a whole, and each replica (see docs/fleets.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.sim.metrics import summarize
from specsim.sim.slo import slo_attainment
from specsim.sim.figures import percentile, run_rates
from specsim.frames import requests_frame, rows_frame
from specsim.sim.result import SimResult


@dataclass(frozen=True, eq=False)
class FleetResult:
    """One policy on one fleet behind one router.

    Attributes
    ----------
    fleet : SimResult
        The whole fleet as one result: per-request arrays in trace order, counters and energy
        summed over replicas. Its ``idle_j``/``idle_s`` include every replica's standby time
        (powered, before its first request or after its last, up to the fleet's last finish),
        also given apart as ``standby_j``/``standby_s``.
    replicas : tuple of SimResult
        Each replica exactly as the single-server engine reports it on the requests routed to it.
    groups : tuple of str
        Each replica's group name.
    gpus_per_replica : tuple of int
    assignment : ndarray(int64, ndim=1), shape (N,)
        The replica each request was routed to.
    router : str
    layout : list of dict
        The fleet's groups (name, count, GPUs per replica, table key).
    standby_j, standby_s : tuple of float
        Each replica's standby energy and time.
    """

    fleet: object
    replicas: tuple
    groups: tuple
    gpus_per_replica: tuple
    assignment: np.ndarray
    router: str
    layout: list
    standby_j: tuple = ()
    standby_s: tuple = ()

    @property
    def policy(self) -> str:
        return self.fleet.policy

    @property
    def gpus(self) -> int:
        return int(sum(self.gpus_per_replica))

    @property
    def makespan_s(self) -> float:
        return self.fleet.makespan_s

    def replica_rows(self, slo=None) -> list:
        """One JSON-ready row per replica: requests, output tokens, tokens/s (its tokens over the
        fleet's makespan, so the rows add up to the fleet's), J/token (with its standby energy),
        utilisation (busy fraction of the fleet's makespan), p99 TTFT and TPOT, KV peak (most
        blocks held / capacity; None without a KV limit), attainment of ``slo`` (an
        :class:`~specsim.sim.slo.SLO`; None: no targets)."""
        span = self.makespan_s
        rows = []
        for i, r in enumerate(self.replicas):
            tokens = int(r.output_tokens.sum())
            e = r.energy
            energy = r.energy_j + (self.standby_j[i] if self.standby_j else 0.0)
            busy = e["decode_s"] + e["prefill_s"]
            tokens_per_s, j_per_token = run_rates(tokens, span, energy)
            rows.append({
                "replica": i, "group": self.groups[i], "gpus": self.gpus_per_replica[i], "requests": r.requests,
                "output_tokens": tokens, "tokens_per_s": tokens_per_s,
                "energy_j": energy, "j_per_token": j_per_token,
                "utilisation": busy / span if span > 0 else None,
                "ttft_p99_s": percentile(r.ttft_s, 99), "tpot_p99_s": percentile(r.tpot_s, 99),
                "kv_peak": (r.kv["peak_blocks"] / r.kv["capacity_blocks"]) if r.kv["capacity_blocks"] else None,
                "slo_attainment": slo_attainment(r, slo)["attainment"],
            })
        return rows

    def summary(self, slo=None) -> dict:
        """The fleet's summary (:func:`specsim.sim.metrics.summarize` of :attr:`fleet`) with the
        router, replica and GPU counts, tokens/s per GPU, and ``per_replica`` rows."""
        s = summarize(self.fleet, slo)
        tps = s["tokens_per_s"]
        s.update({
            "router": self.router, "replicas": len(self.replicas), "gpus": self.gpus, "groups": self.layout,
            "tokens_per_s_per_gpu": tps / self.gpus if tps is not None else None,
            "per_replica": self.replica_rows(slo),
        })
        return s

    def to_frame(self):
        """Per-request rows (pandas), in trace order, with the ``replica`` and ``group`` each
        request was routed to."""
        names = np.array(self.groups, dtype=object)
        return requests_frame(self.fleet, {"replica": self.assignment, "group": names[self.assignment]})

    def replica_frame(self, slo=None):
        """:meth:`replica_rows` as a pandas DataFrame."""
        return rows_frame(self.replica_rows(slo))


def merge_replicas(router, fleet, built, replicas, idle_w, st, arrival, prompt, output):
    """The fleet as one SimResult, and each replica's standby energy and time.

    Per-request arrays are in trace order; counters, energy, KV capacity and block-seconds are
    summed; ``kv["peak_blocks"]`` is the sum of the replicas' peaks (a bound on the fleet's
    simultaneous use: the peaks need not coincide); the step log is every replica's, in time
    order.

    Returns
    -------
    (SimResult, list of float, list of float)
    """
    n = arrival.shape[0]
    per_request = {name: np.full(n, np.nan) for name in ("first_token_s", "finish_s", "scheduled_s")}
    for r, res in enumerate(replicas):
        idx = st.request[r, :res.requests]
        for name, values in per_request.items():
            values[idx] = getattr(res, name)
    start = float(arrival[0]) if n else 0.0
    end = max([r.end_s for r in replicas if r.requests] or [start])
    standby_s, standby_j = [], []
    for res, w in zip(replicas, idle_w):
        covered = res.end_s - float(res.arrival_s[0]) if res.requests else 0.0
        s = max(end - start - covered, 0.0)
        standby_s.append(s)
        standby_j.append(w * s)
    k = max(r.depth_histogram.shape[0] for r in replicas)
    hist = np.zeros(k, dtype=np.int64)
    for r in replicas:
        hist[:r.depth_histogram.shape[0]] += r.depth_histogram
    counters = {key: sum(r.counters[key] for r in replicas) for key in replicas[0].counters}
    energy = {key: sum(r.energy[key] for r in replicas) for key in replicas[0].energy}
    energy["standby_j"] = float(sum(standby_j))
    energy["standby_s"] = float(sum(standby_s))
    energy["idle_j"] += energy["standby_j"]
    energy["idle_s"] += energy["standby_s"]
    caps = [r.kv["capacity_blocks"] for r in replicas]
    kv = {"block_size": replicas[0].kv["block_size"], "capacity_blocks": None if None in caps else sum(caps),
          # The replicas' peaks need not coincide: their sum bounds the fleet's simultaneous use.
          "peak_blocks": sum(r.kv["peak_blocks"] for r in replicas),
          "block_s": float(sum(r.kv["block_s"] for r in replicas))}
    log_t = np.concatenate([r.step_t_s for r in replicas])
    order = np.argsort(log_t, kind="stable")

    def log(name):
        return np.concatenate([getattr(r, name) for r in replicas])[order]

    options = {
        "router": router, "replicas": len(replicas), "gpus": fleet.gpus, "slack": replicas[0].options["slack"],
        "acceptance_trace": None,
        "groups": [dict(p.options.to_dict(), name=g.name, count=g.count) for g, (_, p) in zip(fleet.groups, built)],
    }
    merged = SimResult(
        policy=replicas[0].policy, options=options, policy_spec=replicas[0].policy_spec, arrival_s=arrival,
        prompt_tokens=prompt, output_tokens=output, depth_histogram=hist, counters=counters, energy=energy, kv=kv,
        end_s=end, step_t_s=log_t[order], step_width=log("step_width"), step_mean_depth=log("step_mean_depth"),
        step_tokens=log("step_tokens"), step_kv_blocks=log("step_kv_blocks"),
        step_prefill_tokens=log("step_prefill_tokens"), step_log_stride=max(r.step_log_stride for r in replicas),
        **per_request,
    )
    return merged, standby_j, standby_s
