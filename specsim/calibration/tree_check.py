"""Engine telemetry from a draft-tree run, checked against a calibration's rank acceptance
(docs/telemetry.md#telemetry-from-draft-trees).

Under a tree the engines' counters (SGLang's ``accept len``, vLLM's acceptance counters,
TensorRT-LLM's ``acceptanceLength``) count the tokens each verify step accepted along the path the
target took: means over steps, not which rank the target's token was at each depth. They cannot
fit ``a[d][r]`` (many tables give one mean); they can test one. The tree the serve ran is built
from its settings (:mod:`specsim.tree`), its expected tokens under the calibration's ``a[d][r]``
are the prediction, and the telemetry's mean acceptance length (accepted drafts + 1 per verify
step), with its 95% interval, the measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from specsim._checks import digits_int, show
from specsim._stats import Z95
from specsim.errors import CalibrationError
from specsim.tree import expected_tokens, tree_from_sglang, tree_from_trtllm, tree_from_vllm

TREE_ENGINES = ("sglang", "vllm", "trtllm")
TREE_SETTING_FORMS = ("sglang:TOPK,STEPS,DRAFT_TOKENS", "vllm:'[(0,), (1,), (0, 0)]'",
                      "trtllm:MAX_TOPK,MAX_DRAFT_LEN[,MAX_TOTAL_DRAFT_TOKENS]")


@dataclass(frozen=True)
class TreeCheck:
    """A calibration's predicted mean acceptance length for a tree against the measured one.

    Attributes
    ----------
    setting : str
        The engine setting the tree came from, as given.
    nodes, depth : int
        The tree's draft nodes and depth.
    predicted : float
        Tokens per verify step the calibration's ``a[d][r]`` predicts for the tree (1 + the sum of
        path products: the bonus token included).
    measured : float
        Tokens per verify step the telemetry reports (accepted drafts + 1).
    low, high : float or None
        The measured mean's 95% interval (normal, from the spread of accepted tokens over steps,
        or over records for mean-only sources); None where the source gives one mean.
    steps : float
        Verify steps behind the measurement (0 where the source does not count them).
    how : str
        How the interval was made.
    """

    setting: str
    nodes: int
    depth: int
    predicted: float
    measured: float
    low: Optional[float]
    high: Optional[float]
    steps: float
    how: str

    @property
    def verdict(self) -> str:
        """``"agrees"`` (the prediction lies in the interval), ``"disagrees"`` or ``"no interval"``."""
        if self.low is None:
            return "no interval"
        return "agrees" if self.low <= self.predicted <= self.high else "disagrees"

    def as_dict(self) -> dict:
        return {"setting": self.setting, "nodes": self.nodes, "depth": self.depth, "predicted": self.predicted,
                "measured": self.measured, "low": self.low, "high": self.high, "steps": self.steps,
                "interval": self.how, "verdict": self.verdict}


def tree_of_setting(text: str, rank_acceptance):
    """The :class:`~specsim.tree.Tree` an engine's tree settings build, written ``ENGINE:VALUES``
    (:data:`TREE_SETTING_FORMS`); refused by field (TreeError) or form (CalibrationError)."""
    engine, sep, values = str(text).partition(":")
    engine = engine.strip().lower()
    if not sep or engine not in TREE_ENGINES:
        raise CalibrationError(f"--tree {show(text)} names no engine: write one of {', '.join(TREE_SETTING_FORMS)}")
    if engine == "vllm":
        return tree_from_vllm(values, rank_acceptance)
    nums = [digits_int(v) for v in values.split(",")]  # ASCII digits only: int() reads other scripts' digits
    if None in nums:
        nums = None
    want = {"sglang": (3,), "trtllm": (2, 3)}[engine]
    if nums is None or len(nums) not in want:
        form = next(f for f in TREE_SETTING_FORMS if f.startswith(engine))
        raise CalibrationError(f"--tree {show(text)}: write {form} (whole numbers)")
    if engine == "sglang":
        return tree_from_sglang(*nums, rank_acceptance=rank_acceptance)
    return tree_from_trtllm(*nums, rank_acceptance=rank_acceptance)


def measured_length(records, nodes: int, where: str):
    """Mean acceptance length (accepted drafts + 1 per verify step) of tree-run telemetry records,
    with its 95% interval: ``(mean, low, high, steps, how)``.

    Step histograms and per-position counts (every step's accepted path length) give the
    interval from the spread over steps; mean-only records from the spread of the records'
    means, weighted by their steps (at least two records); a single mean has none. A mean record
    that counts tokens but not steps has ``drafted / nodes`` steps: every step of a tree run
    drafts the whole tree.
    """
    n = s1 = s2 = 0.0
    means = []  # (steps, mean accepted) of mean-only records
    for r in records:
        if r.kind == "steps":
            for (_, a), c in r.steps.items():
                n, s1, s2 = n + c, s1 + a * c, s2 + a * a * c
        elif r.kind == "marginal":
            # A_j steps accepted at least j: sum_a a = sum_j A_j, sum_a a^2 = sum_j (2j - 1) A_j.
            n += r.reached[0] if r.reached else 0
            s1 += sum(r.accepted)
            s2 += sum((2 * j - 1) * c for j, c in enumerate(r.accepted, 1))
        else:
            steps = r.n_steps
            if steps is None and r.drafted_tokens is not None:
                steps = r.drafted_tokens / nodes
            mean = r.mean_accepted
            if r.accepted_tokens is not None and steps:
                mean = r.accepted_tokens / steps
            means.append((steps, mean))
    if means and n:
        raise CalibrationError(f"{where}: the records mix step counts and means; import one kind at a time")
    if n:
        mean = s1 / n
        var = max(s2 / n - mean * mean, 0.0)
        half = Z95 * math.sqrt(var / n) if n > 1 else None
        how = "95% normal interval over verify steps"
        return _length(mean, half, n, how)
    if not means:
        raise CalibrationError(f"{where}: no acceptance counts from the tree run to check")
    counted = all(s is not None and s > 0 for s, _ in means)
    weights = [s if counted else 1.0 for s, _ in means]
    total = sum(weights)
    mean = sum(w * m for w, (_, m) in zip(weights, means)) / total
    k = len(means)
    if k < 2:
        return _length(mean, None, total if counted else 0.0, "one mean: no interval")
    # The ratio estimator's variance over records (each record a cluster of steps).
    var = k / (k - 1) * sum((w * (m - mean)) ** 2 for w, (_, m) in zip(weights, means)) / total ** 2
    return _length(mean, Z95 * math.sqrt(var), total if counted else 0.0,
                   f"95% normal interval over {k} records' means")


def _length(mean_accepted, half, steps, how):
    length = mean_accepted + 1.0
    if half is None:
        return length, None, None, steps, how
    return length, length - half, length + half, steps, how


def check_tree_telemetry(calibration, setting: str, records, where: str) -> TreeCheck:
    """Check ``calibration``'s rank acceptance against telemetry ``records`` of a run whose tree
    the engine setting ``setting`` built (:func:`tree_of_setting`)."""
    a = calibration.rank_acceptance
    if a is None:
        raise CalibrationError(f"{where}: the calibration has no [tree] table, so it predicts nothing for a tree: fit "
                               "one (calib fit --drafts-log with ranks, or --rank-rates)")
    tree = tree_of_setting(setting, a)
    predicted = expected_tokens(a, tree.parents, tree.ranks)
    mean, low, high, steps, how = measured_length(records, tree.nodes, where)
    return TreeCheck(setting, tree.nodes, tree.depth, predicted, mean, low, high, steps, how)


def format_tree_check(check: TreeCheck) -> str:
    """One line per finding, for the command's output."""
    interval = "no interval" if check.low is None else f"95% interval [{check.low:.4f}, {check.high:.4f}]"
    steps = f" over {check.steps:,.0f} verify steps" if check.steps else ""
    lines = [
        f"tree {check.setting}: {check.nodes} nodes, depth {check.depth}",
        f"predicted mean acceptance length {check.predicted:.4f} tokens per verify step (the calibration's a[d][r])",
        f"measured  mean acceptance length {check.measured:.4f}{steps}, {interval} ({check.how})",
    ]
    if check.verdict == "agrees":
        lines.append("the calibration's a[d][r] agrees with this run")
    elif check.verdict == "disagrees":
        lines.append(f"the calibration's a[d][r] disagrees with this run: the prediction is "
                     f"{check.predicted - check.measured:+.4f} tokens per step off the measured mean")
    else:
        lines.append("one mean and no counts behind it: no interval, so no verdict")
    lines.append("telemetry under a tree holds means over nodes, not per-rank data: it checks a[d][r], it never "
                 "fits it (docs/telemetry.md#telemetry-from-draft-trees)")
    return "\n".join(lines)
