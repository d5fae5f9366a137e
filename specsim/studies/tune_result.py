"""What :func:`specsim.tune` found (:class:`TuneResult`, with its :class:`Score` per policy and part
of the trace): the verdict, the held-out table, the schedule file and the engines' exports."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from specsim._text import format_grid
from specsim.interop import export_schedule, per_batch_cost
from specsim.plan import depth_reach, reach_lines
from specsim.policy.policy import parse_policy
from specsim.policy.schedule import policy_text
from specsim.studies.schedule_file import per_batch_verdict, render_schedule


@dataclass(frozen=True)
class Score:
    """One policy on one part of the trace, over seeds.

    Attributes
    ----------
    policy : str
    values : tuple of float
        The objective per seed, in its natural unit (J/token or tokens/s).
    attainment : tuple of float or None
        SLO attainment per seed (None without SLO targets).
    j_per_token, tokens_per_s, tpot_p99_s : float
        Means over seeds.
    """

    policy: str
    values: tuple
    attainment: tuple
    j_per_token: float
    tokens_per_s: float
    tpot_p99_s: float

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def spread(self) -> float:
        """Half the range of the per-seed values (0 with one seed)."""
        return 0.5 * (max(self.values) - min(self.values))

    @property
    def mean_attainment(self):
        return None if self.attainment is None else float(np.mean(self.attainment))


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found.

    Attributes
    ----------
    ranges : tuple of (int, int or None, int)
        The winning schedule, canonical (contiguous from width 1, the last range open).
    objective : str
    train : Score
        The winner on the training window and the search's seeds.
    holdout : tuple of Score
        The winner first, then the built-in policies (and any ``compare=``), on the held-out
        window and seeds.
    best_fixed : str
        The best ``fixed:K`` on the held-out window.
    gain, gain_noise : float
        Mean paired gain of the winner over ``best_fixed`` per seed on the held-out window (in
        the objective's unit, positive = better), and twice its standard error (NaN with one seed).
    starts : dict
        Name -> (ranges, training Score) of every start.
    evaluations : int
        Simulations run (search and final comparison).
    seconds : float
    executor : str
        Where the evaluations ran (``dask``, ``threads`` or ``serial``).
    inputs : dict
        Digests and settings, as written into the schedule file.
    noise_windows : int
        Time windows of the training part a move's gain was checked over (0: off).
    rejected_moves : tuple of dict
        With ``noise_windows``: every move that beat the incumbent on the training window but not
        by more than the noise over the (seed, window) pairs: ``round``, ``policy``, ``gain`` (mean
        per pair, in the objective's unit, positive = better), ``noise`` (t95 x its standard
        error), ``pairs`` and ``zigzag`` (whether it made the depth change direction across widths).
    overloaded : dict or None
        Set only when the search ran with ``allow_overload`` and the tuned schedule overloaded
        the server on the training window (see :meth:`_Search.load`): ``policy``, ``seeds``
        (overloaded of all), ``served_fraction``, ``offered_rate`` and ``served_rate``
        (requests/s).
    trees : dict or None
        Set only by ``tune(trees=True)`` (docs/schedules.md#trees): the static trees an engine can
        serve weighed against the chain schedule. ``candidates`` (``tree:N`` -> training mean),
        ``best`` (the static tree with the lowest objective on the training window), ``chain``
        (the chain policy served: the tuned schedule or the best fixed depth), ``gain`` and
        ``noise`` (the best tree's mean paired gain over the chain per held-out seed, positive =
        better, and twice its standard error; NaN with one seed), ``winner`` (``"chain"``,
        ``"tree"`` or ``"tie"``), and what a static tree costs against ``tree:auto`` (the tree
        changing with width): ``static_cost`` and ``static_cost_noise`` (``tree:auto``'s gain
        over ``best`` on the held-out window, the same way).
    """

    ranges: tuple
    objective: str
    train: Score
    holdout: tuple
    best_fixed: str
    gain: float
    gain_noise: float
    starts: dict
    evaluations: int
    seconds: float
    executor: str
    inputs: dict = field(default_factory=dict)
    noise_windows: int = 0
    rejected_moves: tuple = ()
    overloaded: dict = None
    trees: dict = None

    @property
    def within_noise_moves(self) -> int:
        """How many moves were turned back for a gain inside the noise over (seed, window) pairs."""
        return len(self.rejected_moves)

    @property
    def policy(self) -> str:
        return policy_text(self.ranges)

    @property
    def serves_tuned(self) -> bool:
        """Whether the tuned schedule earned its place: better than the best fixed depth on the
        held-out window by more than the noise (or by anything, with one seed)."""
        if not self.gain > 0:
            return False
        return self.within_noise is not True

    @property
    def recommended(self) -> tuple:
        """The ranges to serve: the tuned ones when :attr:`serves_tuned`, else the best fixed
        depth as one range. The schedule file and the exports carry these."""
        if self.serves_tuned:
            return self.ranges

        return ((1, None, self.best_fixed_depth),)

    @property
    def best_fixed_depth(self) -> int:
        """The depth of :attr:`best_fixed` (read from its label, as the schedule file writes it)."""
        return parse_policy(self.best_fixed).fixed_depth

    @property
    def within_noise(self):
        """Whether the gain over the best fixed depth is no larger than the noise between seeds (None with
        one seed: the noise is not measured)."""
        if self.gain_noise != self.gain_noise:
            return None
        return abs(self.gain) <= self.gain_noise

    @property
    def evaluations_per_s(self) -> float:
        return self.evaluations / self.seconds if self.seconds > 0 else float("inf")

    def unit(self) -> str:
        return "J/token" if self.objective == "energy" else "tok/s"

    @property
    def deepest(self) -> int:
        """The deepest depth the recommended schedule serves."""
        return max(depth for _, _, depth in self.recommended)

    def reach(self) -> dict:
        """:func:`specsim.plan.depth_reach` of :attr:`deepest`: whether it is the table's deepest
        depth (the table ends there: measure deeper) and whether it is past the calibration's
        fitted positions (extrapolated)."""
        return depth_reach(self.deepest, self.inputs.get("table_max_k", -1), self.inputs.get("fitted_positions", 0))

    def reach_lines(self) -> list:
        """:meth:`reach` in words (none when neither applies)."""
        if "table_max_k" not in self.inputs:
            return []
        return reach_lines(self.deepest, self.inputs["table_max_k"], self.inputs["fitted_positions"],
                           "the recommended schedule's deepest depth")

    @property
    def compared_on(self) -> str:
        """Where the final comparison ran: the held-out window, or with holdout 0 the whole trace
        again (its unseen seeds are then all that is new)."""
        return "the whole trace (no holdout)" if self.inputs.get("holdout", 1) == 0 else "the held-out window"

    def verdict(self) -> str:
        """One plain sentence on the gain over the best fixed depth."""
        base = next(s for s in self.holdout if s.policy == self.best_fixed)
        rel = 100.0 * self.gain / abs(base.mean) if base.mean else float("nan")
        noise = "" if self.gain_noise != self.gain_noise else f" +- {100.0 * self.gain_noise / abs(base.mean):.2f}%"
        head = f"on {self.compared_on} the tuned schedule is {rel:+.2f}%{noise} against {self.best_fixed}"
        lost = ("what won on the training window did not carry over" if self.inputs.get("holdout", 1) != 0
                else "what won on the search's seeds did not carry over to unseen ones")

        if self.policy == f"schedule:1-={self.best_fixed_depth}":
            return head + f": the best schedule is the fixed depth itself; serve {self.best_fixed}"
        if self.within_noise is None:
            return head + ": one seed, so the noise is not measured (use 2 or more seeds)"
        if self.within_noise:
            return head + f": inside the noise, so {self.best_fixed} serves as well"
        if self.gain < 0:
            return head + f": worse, so serve {self.best_fixed} ({lost})"
        return head + ": outside the noise"

    def table(self) -> str:
        """The held-out comparison, side by side: the objective with its spread over seeds, the
        other figure, p99 TPOT, SLO attainment when there are targets, and which row is which.
        No column repeats another or is empty throughout."""
        energy = self.objective == "energy"
        slo = any(s.mean_attainment is not None for s in self.holdout)
        rows = []
        for s in self.holdout:
            att = s.mean_attainment
            mark = "tuned" if s is self.holdout[0] else ("best fixed" if s.policy == self.best_fixed else "")
            row = [s.policy, f"{s.mean:.5g}", f"{s.spread:.2g}",
                   f"{s.tokens_per_s:.1f}" if energy else f"{s.j_per_token:.4f}", f"{s.tpot_p99_s * 1000:.1f}"]
            if slo:
                row.append("-" if att is None else f"{100 * att:.1f}%")
            rows.append(row + [mark])
        header = ["policy", self.unit(), "+-", "tok/s" if energy else "J/tok", "TPOT p99 ms"]
        return format_grid(header + (["SLO"] if slo else []) + ["row"], rows)

    def result_section(self) -> dict:
        """The schedule file's ``[result]``."""
        base = next(s for s in self.holdout if s.policy == self.best_fixed)
        result = {
            "train_mean": self.train.mean, "train_spread": self.train.spread,
            "holdout_mean": self.holdout[0].mean, "holdout_spread": self.holdout[0].spread,
            "best_fixed": self.best_fixed, "best_fixed_holdout_mean": base.mean,
            "gain": self.gain, "gain_noise": None if self.gain_noise != self.gain_noise else self.gain_noise,
            "within_noise": self.within_noise, "unit": self.unit(),
            "evaluations": self.evaluations, "seconds": round(self.seconds, 3),
            "tuned": self.policy, "served": "tuned" if self.serves_tuned else "best fixed",
        }
        if self.noise_windows:
            result["noise_windows"] = self.noise_windows
            result["within_noise_moves"] = self.within_noise_moves
            result["within_noise_zigzags"] = sum(bool(m["zigzag"]) for m in self.rejected_moves)
        if "table_max_k" in self.inputs:
            reach = self.reach()
            result["table_ends"], result["extrapolated"] = reach["table_ends"], reach["extrapolated"]
        if self.overloaded:
            result["overloaded"] = True
            result["served_rate"] = self.overloaded["served_rate"]
        return result

    def to_toml(self) -> str:
        """The schedule file (docs/schedules.md#the-schedule-file)."""
        compared = {s.policy: s.mean for s in self.holdout[1:]}
        sections = {"inputs": self.inputs, "result": self.result_section(), "holdout": compared}
        if self.trees is not None:
            sections["trees"] = self.trees_section()
        return render_schedule(self.recommended, objective=self.objective, max_num_seqs=self.inputs.get("max_num_seqs"),
                               sections=sections)

    def trees_section(self) -> dict:
        """The schedule file's ``[trees]``: :attr:`trees` as scalars (a noise not measured left out)."""
        t = self.trees
        out = {"best": t["best"], "chain": t["chain"], "winner": t["winner"], "gain": t["gain"],
               "auto": "tree:auto", "static_cost": t["static_cost"], "unit": self.unit()}
        for name in ("noise", "static_cost_noise"):
            if t[name] == t[name]:
                out[name] = t[name]
        return out

    def tree_lines(self) -> list:
        """:attr:`trees` in words: which wins, and what a static tree costs against ``tree:auto``."""
        if self.trees is None:
            return []
        t, unit = self.trees, self.unit()
        held = {s.policy: s for s in self.holdout}

        def pm(noise):
            return "" if noise != noise else f" +- {noise:.3g}"

        said = {"tree": f"the static tree {t['best']} wins", "chain": f"the chain {t['chain']} wins",
                "tie": "a tie: the difference is inside the noise"}[t["winner"]]
        return [
            f"trees: the best static tree on the training window of {len(t['candidates'])} tried is {t['best']}; "
            f"on {self.compared_on} it gains {t['gain']:+.4g}{pm(t['noise'])} {unit} over {t['chain']} "
            f"({held[t['best']].mean:.5g} against {held[t['chain']].mean:.5g}): {said}",
            f"static tree's cost: tree:auto (the tree changing with width, which no engine serves) gains "
            f"{t['static_cost']:+.4g}{pm(t['static_cost_noise'])} {unit} over {t['best']} on {self.compared_on} "
            f"({held['tree:auto'].mean:.5g} against {held[t['best']].mean:.5g}): {self.static_cost_words()}",
        ]

    def static_cost_words(self) -> str:
        """What serving the best static tree instead of ``tree:auto`` costs, in words."""
        t = self.trees
        cost, noise = t["static_cost"], t["static_cost_noise"]
        if noise == noise and abs(cost) <= noise:
            return f"inside the noise, so the static {t['best']} loses nothing measurable"
        if cost <= 0:
            return f"the static {t['best']} serves as well or better"
        return f"the static {t['best']} costs that much for not changing with width"

    def recommended_for(self, engine: str, cost=None) -> tuple:
        """``(ranges, why)``: what to serve on ``engine``. The tuned per-batch schedule only when
        its held-out gain clears the noise and what the per-batch form costs that engine
        (``cost``, a share; default :func:`specsim.interop.per_batch_cost`); otherwise the best
        fixed depth, its plain static setting. ``why`` says how the gain compared ('' when
        nothing needed saying)."""
        ranges = self.recommended
        if len(ranges) == 1:
            return ranges, ""
        worth, why = per_batch_verdict(self.result_section(), per_batch_cost(engine) if cost is None else cost)
        if worth:
            return ranges, why
        return ((1, None, self.best_fixed_depth),), why

    def export(self, engine: str, cost=None, **kw):
        """The schedule in an engine's format (:func:`specsim.interop.export_schedule`), as
        :meth:`recommended_for` decides; the notes say when the per-batch form was not worth it."""
        kw.setdefault("max_num_seqs", self.inputs.get("max_num_seqs"))
        ranges, why = self.recommended_for(engine, cost)
        cfg = export_schedule(engine, ranges, **kw)
        return replace(cfg, notes=cfg.notes + ((why,) if why else ())) if why else cfg
