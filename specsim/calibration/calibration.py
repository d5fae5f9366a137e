"""``AcceptanceCalibration``: confidence -> acceptance, fitted on one drafter (docs/calibration.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specsim import _toml
from specsim._checks import MAX_DEPTH, check_int, is_int, is_number, show
from specsim._io import read_input
from specsim.calibration._types import CalibrationArrays, DrafterKey
from specsim.calibration.drift import dispersion_problems
from specsim.calibration.spread import centres, check_spread, spread_problems
from specsim.calibration._types import RequestSpread
from specsim.calibration.tree_table import checked_rank_acceptance, checked_tree_counts, read_tree, tree_lines
from specsim.errors import CalibrationError

DRAFTER_STRINGS = ("weights_sha256", "quantization")


class AcceptanceCalibration:
    """How likely a draft is to be accepted, given the drafter's top-1 log-probability for it.

    Parameters
    ----------
    drafter : DrafterKey
    edges : array_like of float, shape (B,)
        Ascending log-probability upper bounds, stored as float32; the last is >= 0.
    p_accept : array_like of float, shape (B,)
        P(accept) per bucket, in [0, 1].
    prior_by_position : array_like of float, shape (P,)
        P(draft j accepted | drafts before it accepted), j = 1, 2, ...
    spread : RequestSpread, optional
        How acceptance differs from request to request (docs/calibration.md#per-request-spread);
        None (the default) is no spread: every request draws at the calibration's rates.
    rank_acceptance : array_like of float, shape (D, R), optional
        Draft trees (docs/calibration.md#draft-trees): ``rank_acceptance[d - 1, r - 1]`` is the
        probability that the target's token at depth ``d`` (the path to it accepted) is the
        drafter's rank-``r`` candidate there; each row sums to at most 1. None (the default): the
        calibration plans chains only.
    tree_counts : TreeCounts, optional
        The counts ``rank_acceptance`` was fitted from (only with it): each cell must equal
        ``matched / reached`` of its depth.

    Raises
    ------
    CalibrationError
        Listing every rule of the calibration rules (docs/formats.md#acceptance-calibration) the arrays break.
    """

    __slots__ = ("drafter", "edges", "p_accept", "priors", "meta", "spread", "rank_acceptance", "tree_counts")

    def __init__(self, drafter: DrafterKey, edges, p_accept, prior_by_position, meta=None, source="<calibration>",
                 spread=None, rank_acceptance=None, tree_counts=None):
        try:
            edges = _edges_f32(edges)
            p_accept = np.asarray(p_accept, dtype=np.float64).reshape(-1)
            priors = np.asarray(prior_by_position, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError) as e:
            raise CalibrationError(f"{source}: edges, p_accept and prior_by_position must be lists of numbers "
                                   f"({e})") from None
        problems = _rule_problems(edges, p_accept, priors)
        if problems:
            raise CalibrationError(f"{source}: the acceptance calibration is refused", problems)
        self.drafter = drafter
        self.edges = np.ascontiguousarray(edges)
        self.p_accept = np.ascontiguousarray(p_accept)
        self.priors = np.ascontiguousarray(priors)
        for a in (self.edges, self.p_accept, self.priors):
            a.flags.writeable = False
        self.meta = dict(meta or {})
        self.spread = check_spread(spread, source)
        self.rank_acceptance = None if rank_acceptance is None else checked_rank_acceptance(rank_acceptance, source)
        self.tree_counts = checked_tree_counts(tree_counts, self.rank_acceptance, source)

    def with_spread(self, spread) -> "AcceptanceCalibration":
        """This calibration with ``spread`` (a :class:`RequestSpread`, or None for none); its
        rank acceptance and tree counts carry over."""
        return AcceptanceCalibration(self.drafter, self.edges, self.p_accept, self.priors, meta=self.meta,
                                     spread=spread, rank_acceptance=self.rank_acceptance,
                                     tree_counts=self.tree_counts)

    def with_rank_acceptance(self, rank_acceptance, tree_counts=None) -> "AcceptanceCalibration":
        """This calibration with ``rank_acceptance`` (shape (D, R), or None: chains only) and the
        :class:`TreeCounts` it was fitted from (None: none; the old counts never carry over to a
        new table)."""
        return AcceptanceCalibration(self.drafter, self.edges, self.p_accept, self.priors, meta=self.meta,
                                     spread=self.spread, rank_acceptance=rank_acceptance, tree_counts=tree_counts)

    # -- files ----------------------------------------------------------------------------
    @classmethod
    def parse(cls, text, source: str = "<text>", *, usage: str | None = None) -> "AcceptanceCalibration":
        """Parse and validate calibration text (docs/formats.md#acceptance-calibration), listing every problem.

        ``usage`` is how a command takes the table and the calibration when not as ``--table`` and
        ``--calibration`` (``"specsim plan TABLE CALIBRATION"``): the hint given when the text is a
        cost table names the swap that way.
        """
        doc = _toml.loads(text, "the acceptance calibration", source, CalibrationError)
        problems = []
        drafter = _read_drafter(doc.get("drafter", _toml.MISSING), problems)
        arrays = _read_acceptance(doc.get("acceptance", _toml.MISSING), problems)
        spread = None
        for section in ("drafter", "acceptance", "meta"):
            if isinstance(doc.get(section), dict) and "request_spread" in doc[section]:
                problems.append(f"[{section}] request_spread = {_toml.show(doc[section]['request_spread'])} would be "
                                "ignored: the spread is a [request_spread] table of its own (logit_sd, standard_error, "
                                "requests, source; docs/calibration.md#per-request-spread)")
        if "request_spread" in doc:
            raw = doc["request_spread"]
            found = spread_problems(raw)
            problems += found
            if not found:
                spread = RequestSpread(float(raw["logit_sd"]), float(raw["standard_error"]), int(raw["requests"]),
                                       raw["source"])
        rank_acceptance = tree_counts = None
        if "tree" in doc:
            rank_acceptance, tree_counts = read_tree(doc["tree"], problems)
        meta = doc.get("meta", {})
        if isinstance(meta, dict) and arrays is not None:
            problems += dispersion_problems(meta, len(arrays[2]))
        if problems:
            swapped = _toml.swapped_hint(doc, "acceptance calibration", usage)
            raise CalibrationError(f"{source}: the acceptance calibration cannot be read"
                                   + (f": {swapped}" if swapped else ""), problems)
        return cls(drafter, *arrays, meta=meta if isinstance(meta, dict) else {}, source=source, spread=spread,
                   rank_acceptance=rank_acceptance, tree_counts=tree_counts)

    @classmethod
    def load(cls, path, *, usage: str | None = None) -> "AcceptanceCalibration":
        """Read and validate a calibration file (``usage``: as :meth:`parse` takes it)."""
        text = read_input(path, "the calibration", CalibrationError)
        return cls.parse(text, str(Path(path)), usage=usage)

    def render(self, meta=None) -> str:
        """The calibration file text; parses back to an equal calibration."""
        d = self.drafter
        meta = self.meta if meta is None else meta
        try:
            lines = [
                "[drafter]",
                f"weights_sha256 = {_toml.string(d.weights_sha256)}",
                f"vocab = {_toml.number(int(d.vocab))}",
                f"quantization = {_toml.string(d.quantization)}",
                f"context = {_toml.number(bool(d.context))}",
                "",
                "[acceptance]",
                "edges = [" + ", ".join(_f32(e) for e in self.edges) + "]",
                "p_accept = [" + ", ".join(_toml.number(float(p)) for p in self.p_accept) + "]",
                "prior_by_position = [" + ", ".join(_toml.number(float(p)) for p in self.priors) + "]",
            ]
            if self.spread is not None:
                sp = self.spread
                lines += ["", "[request_spread]", f"logit_sd = {_toml.number(sp.logit_sd)}",
                          f"standard_error = {_toml.number(sp.standard_error)}",
                          f"requests = {_toml.number(sp.requests)}", f"source = {_toml.string(sp.source)}"]
            if self.rank_acceptance is not None:
                lines += ["", *tree_lines(self.rank_acceptance, self.tree_counts)]
            if meta:
                lines += ["", "[meta]"] + [f"{_toml.key(k)} = {_toml.scalar(v)}" for k, v in meta.items()]
        except ValueError as e:
            raise CalibrationError(f"the calibration cannot be written as TOML: {e}") from e
        text = "\n".join(lines) + "\n"
        if AcceptanceCalibration.parse(text, "the calibration to write") != self:
            raise CalibrationError("the rendered calibration does not read back identically")
        return text

    # -- queries (docs/calibration.md#queries) --------------------------------------------------------------
    def engine_arrays(self) -> CalibrationArrays:
        """The calibration's arrays as the simulated server reads them (its own arrays, not
        copies: the engine only reads them), with the bucket index, the cells' probabilities (the
        planner's lookup) and the request spread's centres built once."""
        sp = self.spread
        centre = np.zeros(0, np.float64)
        if sp is not None and sp.logit_sd != 0.0:
            centre = np.ascontiguousarray(centres(self.p_accept, sp.logit_sd))
        return CalibrationArrays(self.edges, bucket_cells(self.edges), cell_probabilities(self.edges, self.p_accept),
                                 self.p_accept, self.priors, centre)

    def bucket(self, lp: float) -> int:
        """Bucket index of a confidence: the first edge with ``lp <= edge`` in float32, else the last.

        NaN compares false with every edge and so lands in the last bucket, as metrale's lookup does.
        """
        from specsim.calibration._kernels import bucket_nb  # lazy: Numba loads with the first kernel call

        if not is_number(lp):
            raise CalibrationError(f"a confidence must be a number (a log-probability), got {show(lp)}")
        with np.errstate(over="ignore"):  # past float32's range is -inf: the first bucket
            lp = np.float32(lp)
        if np.isnan(lp):
            return self.edges.shape[0] - 1
        return int(bucket_nb(self.edges, lp))

    def p_given_lp(self, lp: float) -> float:
        """P(accept) of a draft whose top-1 log-probability is ``lp`` (docs/calibration.md#queries).

        This is metrale's bucket lookup, NaN included (last bucket). Where a position is known
        (:meth:`expected_accepted`, the planner, the simulator) a NaN confidence is instead
        treated as unmeasured and takes the position prior: specsim's choice (docs/calibration.md#queries).
        """
        return float(self.p_accept[self.bucket(lp)])

    def prior(self, j: int) -> float:
        """Prior of 1-based draft position ``j``; past the last fitted position, the last prior."""
        if not is_int(j):
            raise CalibrationError(f"a draft position must be a whole number (counting from 1), got {show(j)}")
        i = min(max(int(j) - 1, 0), self.priors.shape[0] - 1)
        return float(self.priors[i])

    def expected_accepted(self, lps, k: int) -> float:
        """Expected accepted drafts among the first ``k`` of a chain with confidences ``lps``.

        Positions without a confidence (past the end of ``lps``, or NaN) take the position prior.
        """
        with np.errstate(over="ignore"):  # past float32's range is -inf: the first bucket
            lps = np.ascontiguousarray(lps, dtype=np.float32).reshape(1, -1)
        out = self.expected_accepted_batch(lps, np.array([lps.shape[1]], dtype=np.int64), int(k))
        return float(out[0])

    def p_matrix(self, confidences, n_conf, m_out=None, out=None):
        """P(accept) per row and draft position of a batch (docs/calibration.md#queries).

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (n, m)
        n_conf : ndarray(int64, ndim=1), shape (n,)
            Real entries per row.
        m_out : int, optional
            Positions to return (default m); positions past a row's confidences take priors.

        Returns
        -------
        ndarray(float64, ndim=2), shape (n, m_out)
        """
        from specsim.calibration._kernels import p_matrix_nb  # lazy: Numba loads with the first kernel call

        conf, n_conf = _batch(confidences, n_conf)
        if m_out is not None:
            m_out = check_int(m_out, "m_out (positions to return)", CalibrationError, 0, MAX_DEPTH)
        if out is None:
            out = np.empty((conf.shape[0], conf.shape[1] if m_out is None else m_out))
        elif not (_ready(out, _F64, 2) and out.shape[0] == conf.shape[0]):
            raise CalibrationError(f"out must be a contiguous float64 array with {conf.shape[0]} rows")
        p_matrix_nb(self.edges, self.p_accept, self.priors, conf, n_conf, out)
        return out

    def buckets(self, confidences):
        """Bucket index of every confidence of a float32 matrix (-1 where NaN)."""
        from specsim.calibration._kernels import buckets_nb  # lazy: Numba loads with the first kernel call

        conf = np.ascontiguousarray(np.atleast_2d(confidences), dtype=np.float32)
        out = np.empty(conf.shape, dtype=np.int64)
        buckets_nb(self.edges, conf, out)
        return out

    def expected_accepted_batch(self, confidences, n_conf, depths, out=None):
        """Expected accepted drafts per row of a batch.

        Arrays already in the kernel's dtype and layout go to the kernel as they are, and the
        kernel checks ``n_conf`` itself, so a scheduler loop calling this every step pays no
        conversion or extra pass.

        Parameters
        ----------
        confidences : ndarray(float32, ndim=2), shape (n, m)
        n_conf : ndarray(int64, ndim=1), shape (n,)
            Real entries per row, each in ``0..=m``.
        depths : int or ndarray(int64, ndim=1), shape (n,)
            Drafts counted per row.
        out : ndarray(float64, ndim=1), shape (n,), optional
            Filled in place when given.

        Returns
        -------
        ndarray(float64, ndim=1), shape (n,)
        """
        kernels = _kernels()
        conf = confidences if _ready(confidences, _F32, 2) else _as_conf(confidences)
        nc = n_conf if _ready(n_conf, _I64, 1) else np.ascontiguousarray(n_conf, dtype=np.int64).reshape(-1)
        n = conf.shape[0]
        if nc.shape[0] != n:
            raise CalibrationError(f"n_conf has {nc.shape[0]} entries for {n} rows of confidences")
        if out is None:
            out = np.empty(n)
        elif not (_ready(out, _F64, 1) and out.shape[0] == n):
            raise CalibrationError(f"out must be a contiguous float64 array of shape ({n},)")
        if is_int(depths):
            if depths < 0:
                raise CalibrationError(f"draft depth {depths} is negative")
            bad = kernels.expected_accepted_k_nb(self.edges, self.p_accept, self.priors, conf, nc, int(depths), out)
        else:
            d = depths if _ready(depths, _I64, 1) and depths.shape[0] == n else np.ascontiguousarray(
                np.broadcast_to(np.asarray(depths, dtype=np.int64), (n,)))
            bad = kernels.expected_accepted_nb(self.edges, self.p_accept, self.priors, conf, nc, d, out)
            if bad and (d < 0).any():
                raise CalibrationError("draft depths must be >= 0")
        if bad:
            raise CalibrationError(f"n_conf entries must be in 0..={conf.shape[1]} (the matrix's columns)")
        return out

    # -- value semantics ------------------------------------------------------------------
    def __eq__(self, other):
        if not isinstance(other, AcceptanceCalibration):
            return NotImplemented
        return (
            self.drafter == other.drafter
            and np.array_equal(self.edges, other.edges, equal_nan=True)
            and np.array_equal(self.p_accept, other.p_accept)
            and np.array_equal(self.priors, other.priors)
            and self.spread == other.spread
            and _same_optional(self.rank_acceptance, other.rank_acceptance)
            and self.tree_counts == other.tree_counts
        )

    __hash__ = None

    def __repr__(self):
        return (
            f"AcceptanceCalibration(buckets={self.edges.shape[0]}, "
            f"positions={self.priors.shape[0]}, drafter={self.drafter!r}"
            + (f", logit_sd={self.spread.logit_sd:g}" if self.spread is not None else "")
            + (f", tree_depths={self.rank_acceptance.shape[0]}, ranks={self.rank_acceptance.shape[1]}"
               if self.rank_acceptance is not None else "") + ")"
        )


def _same_optional(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.array_equal(a, b)


def bucket_cells(edges):
    """The coarse index ``bucket_fast_nb`` reads: per cell of float32 values, the bucket of its
    lowest value (clamped to the last bucket).

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)

    Returns
    -------
    ndarray(int64, ndim=1), shape (BUCKET_CELLS,)
    """
    from specsim.calibration._kernels import BUCKET_CELLS  # lazy: Numba loads with the first kernel call

    keys = ((np.arange(BUCKET_CELLS, dtype=np.int64) - BUCKET_CELLS // 2) << 20).astype(np.int32)
    lowest = (keys ^ ((keys >> 31) & 0x7FFFFFFF)).view(np.float32).copy()
    lowest[np.isnan(lowest)] = -np.inf
    # The number of edges below a value is the first bucket whose edge is >= it.
    first = np.searchsorted(np.asarray(edges, dtype=np.float32), lowest, side="left")
    return np.minimum(first, len(edges) - 1).astype(np.int64)


def cell_buckets(edges):
    """Per cell of :func:`bucket_cells`' coarse index, the one bucket all of its values fall in,
    else -1 (a cell an edge cuts, or one holding NaN), and the cell's highest value (float32).

    A cell's float32 values run from its lowest to its highest (their order is the cell's bit
    patterns' order), so the cell lies in one bucket when those two do; NaN patterns sit at the
    two ends of the order, so a cell holding one has it at an end.

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)

    Returns
    -------
    (ndarray(int64, ndim=1), ndarray(float32, ndim=1)), each of shape (BUCKET_CELLS,)
    """
    from specsim.calibration._kernels import BUCKET_CELLS  # lazy: Numba loads with the first kernel call

    first = (np.arange(BUCKET_CELLS, dtype=np.int64) - BUCKET_CELLS // 2) << 20
    ends = []
    for keys in (first.astype(np.int32), (first | 0xFFFFF).astype(np.int32)):
        ends.append((keys ^ ((keys >> 31) & 0x7FFFFFFF)).view(np.float32))
    nan = np.isnan(ends[0]) | np.isnan(ends[1])
    edges = np.asarray(edges, dtype=np.float32)
    low, high = (np.minimum(np.searchsorted(edges, np.where(nan, 0.0, e).astype(np.float32), side="left"),
                            len(edges) - 1) for e in ends)
    return np.where(nan | (low != high), -1, low), ends[1]


def cell_probabilities(edges, p_accept):
    """Per cell of :func:`bucket_cells`' coarse index, the acceptance probability of its values
    when all of them fall in one bucket (:func:`cell_buckets`), else -1 (a cell an edge cuts, or
    one holding NaN): one load answers a confidence in such a cell, with no comparison against
    the edges.

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)
    p_accept : ndarray(float64, ndim=1), shape (B,)

    Returns
    -------
    ndarray(float64, ndim=1), shape (BUCKET_CELLS,)
    """
    bucket, _ = cell_buckets(edges)
    return np.where(bucket < 0, -1.0, np.asarray(p_accept, dtype=np.float64)[np.maximum(bucket, 0)])


def conditional_priors(rates, form: str = "marginal"):
    """Per-position conditional priors from rates a serve reports (docs/calibration.md#queries).

    Parameters
    ----------
    rates : sequence of float
        ``form="marginal"``: P(draft j accepted), unconditionally (vLLM's per-position rates);
        ``form="conditional"``: P(draft j accepted | drafts before it accepted), returned as is.

    Returns
    -------
    list of float
        ``c_j = m_j / m_{j-1}`` with ``m_0 = 1``, clamped to [0, 1]; 0 after a zero marginal.
    """
    rates = [float(r) for r in rates]
    bad = [f"position {j}: {r!r}" for j, r in enumerate(rates, 1) if not (0.0 <= r <= 1.0)]
    if not rates:
        raise CalibrationError("no acceptance rates given: pass at least position 1's rate")
    if bad:
        raise CalibrationError(f"{form} acceptance rates must be in [0, 1]", bad)
    if form == "conditional":
        return rates
    if form != "marginal":
        raise CalibrationError(f"rate form {form!r} is neither 'marginal' nor 'conditional'")
    out, before = [], 1.0
    for m in rates:
        out.append(0.0 if before == 0.0 else min(max(m / before, 0.0), 1.0))
        if before != 0.0:
            before = m
    return out


def rising_positions(values):
    """The positions ``j`` (1-based, from 2) whose marginal rate or accepted count is above
    position ``j - 1``'s: impossible for marginal rates (a draft is accepted only after the ones
    before it were), so a conditional rate above 1 that :func:`conditional_priors` clamps to 1.
    Every reader of marginal rates asks this one question."""
    return [j for j in range(2, len(values) + 1) if values[j - 1] > values[j - 2]]


_F32, _I64, _F64 = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.float64)
_KERNELS = None


def _kernels():
    """The kernel module, imported on first use (importing it loads Numba) and kept: an import
    statement on every call would cost more than a small batch's kernel."""
    global _KERNELS
    if _KERNELS is None:
        from specsim.calibration import _kernels as kernels  # lazy: Numba loads with the first kernel call

        _KERNELS = kernels
    return _KERNELS


def _ready(a, dtype, ndim) -> bool:
    """Whether ``a`` can go to a kernel as it is: an ndarray of this dtype, rank and C layout."""
    return type(a) is np.ndarray and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous


def _as_conf(confidences):
    conf = np.ascontiguousarray(confidences, dtype=np.float32)
    if conf.ndim != 2:
        raise CalibrationError(f"confidences must be a 2-d float32 matrix (n, m), got shape {conf.shape}")
    return conf


def _batch(confidences, n_conf):
    conf = _as_conf(confidences)
    n_conf = np.ascontiguousarray(n_conf, dtype=np.int64).reshape(-1)
    if n_conf.shape[0] != conf.shape[0]:
        raise CalibrationError(f"n_conf has {n_conf.shape[0]} entries for {conf.shape[0]} rows of confidences")
    if (n_conf < 0).any() or (n_conf > conf.shape[1]).any():
        raise CalibrationError(f"n_conf entries must be in 0..={conf.shape[1]} (the matrix's columns)")
    return conf, n_conf


def _edges_f32(values):
    """Edges as float32, each rounded once from its own value (an integer is not first made a
    float64: that double rounding can land on a different float32 above 2**53)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        arr = values.reshape(-1)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float64)
        with np.errstate(over="ignore"):
            return arr.astype(np.float32)
    if np.ndim(values) == 0:
        values = [values]
    out = np.empty(len(values), dtype=np.float32)
    with np.errstate(over="ignore"):
        for i, v in enumerate(values):
            if is_int(v):
                out[i] = np.array(v, dtype=np.int64).astype(np.float32)
            else:
                out[i] = np.float32(float(v))
    return out


def _f32(value) -> str:
    """Shortest decimal that reads back (through f64, then f32) as the same float32."""
    v = np.float32(value)
    if not np.isfinite(v):
        return _toml.number(float(v))
    short = np.format_float_positional(v, unique=True, trim="0")
    if len(short) <= 24 and np.float32(float(short)) == v:
        return short
    return repr(float(v))  # the exact binary value: always reads back


def _rule_problems(edges, p_accept, priors):
    problems = []
    if edges.shape[0] == 0:
        problems.append("edges is empty: give at least one bucket edge (the last >= 0)")
    if p_accept.shape[0] != edges.shape[0]:
        problems.append(f"p_accept has {p_accept.shape[0]} entries for {edges.shape[0]} edges: one per bucket")
    for i in range(1, edges.shape[0]):
        if not edges[i - 1] < edges[i]:
            problems.append(
                f"edges[{i - 1}] = {float(edges[i - 1])!r} and edges[{i}] = {float(edges[i])!r} are not strictly ascending (as float32)"
            )
    if np.isnan(edges).any():
        problems.append(f"edges[{int(np.flatnonzero(np.isnan(edges))[0])}] is NaN: a bucket edge is a log-probability")
    elif edges.shape[0] and not edges[-1] >= 0:
        problems.append(f"the last edge {float(edges[-1])!r} is < 0: it must be >= 0 so every log-probability lands")
    for name, arr in (("p_accept", p_accept), ("prior_by_position", priors)):
        for i, p in enumerate(arr):
            if not 0.0 <= p <= 1.0:
                problems.append(f"{name}[{i}] = {float(p)!r} is not a probability in [0, 1]")
    if priors.shape[0] == 0:
        problems.append("prior_by_position is empty: give at least position 1's prior")
    return problems


def _read_drafter(raw, problems):
    if raw is _toml.MISSING:
        problems.append("there is no [drafter] table (weights_sha256, vocab, quantization, context)")
        return None
    if not isinstance(raw, dict):
        problems.append(f"`drafter` is a {_toml.type_name(raw)}, not a table")
        return None
    values = {}
    for name in ("weights_sha256", "vocab", "quantization", "context"):
        value = raw.get(name, _toml.MISSING)
        if value is _toml.MISSING:
            problems.append(f"[drafter] has no `{name}`")
            continue
        if name in DRAFTER_STRINGS:
            ok, want = isinstance(value, str), "a string"
        elif name == "vocab":
            ok, want = _toml.as_uint(value) is not None, "a non-negative integer"
        else:
            ok, want = isinstance(value, bool), "true or false"
        if not ok:
            problems.append(f"[drafter] {name} = {value!r} is not {want}")
            continue
        values[name] = value
    return DrafterKey(**values) if len(values) == 4 else None


def _read_acceptance(raw, problems):
    if raw is _toml.MISSING:
        problems.append("there is no [acceptance] table (edges, p_accept, prior_by_position)")
        return None
    if not isinstance(raw, dict):
        problems.append(f"`acceptance` is a {_toml.type_name(raw)}, not a table")
        return None
    arrays = []
    for name in ("edges", "p_accept", "prior_by_position"):
        value = raw.get(name, _toml.MISSING)
        if value is _toml.MISSING:
            problems.append(f"[acceptance] has no `{name}` array")
            continue
        if not isinstance(value, list):
            problems.append(f"[acceptance] {name} is a {_toml.type_name(value)}, not an array of numbers")
            continue
        nums = [_toml.as_float(v) for v in value]
        bad = [i for i, v in enumerate(nums) if v is None]
        if bad:
            problems.append(f"[acceptance] {name}[{bad[0]}] = {value[bad[0]]!r} is not a number")
            continue
        # Edges keep their integers so each is rounded to float32 once, as metrale's reader does.
        arrays.append(_edges_f32(value) if name == "edges" else nums)
    return arrays if len(arrays) == 3 else None
