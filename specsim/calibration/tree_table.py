"""The calibration's ``[tree]`` table (docs/formats.md#acceptance-calibration): the rank acceptance
of draft trees and the counts behind it, checked by name, read and written
(docs/calibration.md#draft-trees)."""

from __future__ import annotations

import numpy as np

from specsim import _toml
from specsim._checks import COUNT_MAX, MAX_TREE_DEPTH, MAX_TREE_RANKS, is_int, is_number, show
from specsim.calibration._types import TreeCounts
from specsim.errors import CalibrationError

# A row of rank_acceptance may sum past 1 by this much (the rounding of a fit's divisions and of
# a file's decimals); more is refused.
RANK_ROW_SLACK = 1e-9


def rank_acceptance_problems(a) -> list:
    """Every rule a rank-acceptance array (shape (D, R), float64) breaks, one line each, naming
    the depth and rank (both 1-based) of the cell."""
    if a.ndim != 2:
        return [f"rank_acceptance must be a table of depths x ranks (2 dimensions), got {a.ndim}"]
    depths, ranks = a.shape
    problems = []
    if not 1 <= depths <= MAX_TREE_DEPTH:
        problems.append(f"rank_acceptance has {depths} depths (rows): give 1..{MAX_TREE_DEPTH}")
    if not 1 <= ranks <= MAX_TREE_RANKS:
        problems.append(f"rank_acceptance has {ranks} ranks (columns): give 1..{MAX_TREE_RANKS}")
    if problems:
        return problems
    bad = np.argwhere(~((a >= 0.0) & (a <= 1.0)))
    for d, r in bad:
        problems.append(f"rank_acceptance depth {d + 1} rank {r + 1} = {float(a[d, r])!r} is not a probability in [0, 1]")
    if not len(bad):
        sums = a.sum(axis=1)
        for d in np.flatnonzero(sums > 1.0 + RANK_ROW_SLACK):
            problems.append(f"rank_acceptance depth {d + 1} sums to {float(sums[d])!r} over its ranks: a row is "
                            "one draw of the target's token, so its ranks sum to at most 1")
    return problems


def _non_number(raw):
    """The first cell of ``raw`` (an array of any dtype) that is not a real number (int or float,
    not a boolean), as ``"depth d rank r = value"`` (1-based, where it is a table), or None."""
    for index in np.ndindex(raw.shape):
        v = raw[index]
        if not is_number(v.item() if isinstance(v, np.generic) else v):
            where = f"depth {index[0] + 1} rank {index[1] + 1} = " if len(index) == 2 else ""
            return f"{where}{show(v.item() if isinstance(v, np.generic) else v)}"
    return None


def checked_rank_acceptance(value, source: str = "<calibration>"):
    """``value`` as a read-only C-contiguous float64 array of shape (D, R), or CalibrationError
    listing every rule it breaks."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        raise CalibrationError(f"{source}: rank_acceptance must be a table of numbers (depths x ranks), "
                               f"got {show(value)}")
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "fiu":  # a string, a boolean or a complex number is no rate, nor converted to one
            cell = _non_number(raw)
            if cell is not None:
                raise CalibrationError(f"{source}: rank_acceptance must be a table of numbers (depths x ranks): "
                                       f"{cell} is not a number")
        a = np.array(raw, dtype=np.float64, copy=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise CalibrationError(f"{source}: rank_acceptance must be a table of numbers (depths x ranks) ({e})") from None
    problems = rank_acceptance_problems(a)
    if problems:
        raise CalibrationError(f"{source}: the rank acceptance is refused", problems)
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def tree_counts_problems(reached, matched, a) -> list:
    """Every rule tree counts break against their rank acceptance ``a`` (shape (D, R)), one line
    each, naming the depth and rank (1-based): one count per depth and one per cell, whole
    numbers in 0..2^62, each depth reached at least once, and each cell equal to ``matched /
    reached`` of its depth (so a row's matches add up to at most its reached paths, as the row's
    ranks sum to at most 1)."""
    depths, ranks = a.shape
    if len(reached) != depths:
        return [f"reached has {len(reached)} entries for {depths} depths of rank_acceptance: one per depth"]
    problems = []
    for d, row in enumerate(matched, 1):
        if len(row) != ranks:
            problems.append(f"matched depth {d} has {len(row)} ranks, rank_acceptance has {ranks}: one count per cell")
    if len(matched) != depths:
        problems.append(f"matched has {len(matched)} depths (rows) for {depths} of rank_acceptance")
    if problems:
        return problems
    for d, (n, row) in enumerate(zip(reached, matched), 1):
        bad = [(f"reached depth {d}", n)] + [(f"matched depth {d} rank {r}", m) for r, m in enumerate(row, 1)]
        wrong = [f"{name} = {show(v)} is not a whole number in 0..2^62" for name, v in bad
                 if not (is_int(v) and 0 <= v <= COUNT_MAX)]
        if wrong:
            problems += wrong
            continue
        if n == 0:
            problems.append(f"reached depth {d} = 0: a depth no path reached has no rate; drop the row")
            continue
        for r, m in enumerate(row, 1):
            if abs(float(a[d - 1, r - 1]) - m / n) > RANK_ROW_SLACK:
                problems.append(f"rank_acceptance depth {d} rank {r} = {float(a[d - 1, r - 1])!r} disagrees with "
                                f"its counts: matched {m} / reached {n} = {m / n!r}")
    return problems


def checked_tree_counts(value, rank_acceptance, source: str = "<calibration>"):
    """``value`` (a :class:`TreeCounts`, or None) with plain int tuples, or CalibrationError listing
    every rule it breaks against ``rank_acceptance`` (see :func:`tree_counts_problems`)."""
    if value is None:
        return None
    if not isinstance(value, TreeCounts):
        raise CalibrationError(f"{source}: tree_counts must be a TreeCounts (reached, matched, source), "
                               f"got {show(value)}")
    if rank_acceptance is None:
        raise CalibrationError(f"{source}: tree counts need the rank acceptance they were fitted to")
    if not isinstance(value.source, str):
        raise CalibrationError(f"{source}: the tree counts' source must be a string, got {show(value.source)}")
    try:
        reached = tuple(value.reached)
        matched = tuple(tuple(row) for row in value.matched)
    except TypeError:
        raise CalibrationError(f"{source}: tree counts are a list of reached counts (one per depth) and a "
                               "table of matched counts (depths x ranks)") from None
    problems = tree_counts_problems(reached, matched, rank_acceptance)
    if problems:
        raise CalibrationError(f"{source}: the tree counts are refused", problems)
    return TreeCounts(tuple(int(n) for n in reached), tuple(tuple(int(m) for m in row) for row in matched),
                      value.source)


def tree_lines(rank_acceptance, tree_counts) -> list:
    """The ``[tree]`` table's lines, as :func:`read_tree` reads them back."""
    lines = ["[tree]", "rank_acceptance = " + _toml_rows(rank_acceptance.tolist())]
    if tree_counts is not None:
        lines += ["reached = [" + ", ".join(_toml.number(c) for c in tree_counts.reached) + "]",
                  "matched = " + _toml_rows(tree_counts.matched)]
        if tree_counts.source:
            lines.append(f"source = {_toml.string(tree_counts.source)}")
    return lines


def _toml_rows(rows) -> str:
    """A table of numbers as a TOML array of arrays, one row per depth."""
    return "[" + ", ".join("[" + ", ".join(_toml.number(v) for v in row) + "]" for row in rows) + "]"


def read_tree(raw, problems):
    """The ``[tree]`` table (docs/formats.md#acceptance-calibration): ``(rank_acceptance, TreeCounts or
    None)``, or ``(None, None)`` with every problem appended, each naming the field, depth and rank."""
    before = len(problems)
    if not isinstance(raw, dict):
        problems.append(f"`tree` is a {_toml.type_name(raw)}, not a table")
        return None, None
    if "rank_acceptance" not in raw:
        problems.append("[tree] has no `rank_acceptance` (rows depths 1..D, columns ranks 1..R)")
        return None, None
    rows = _tree_rows(raw["rank_acceptance"], "rank_acceptance", _toml.as_float, "a number", problems)
    a = None
    if rows is not None:
        a = np.array(rows, dtype=np.float64).reshape(len(rows), -1)
        problems += [f"[tree] {p}" for p in rank_acceptance_problems(a)]
    has = [name for name in ("reached", "matched") if name in raw]
    counts = None
    if len(has) == 1:
        problems.append(f"[tree] has `{has[0]}` without `{({'reached', 'matched'} - set(has)).pop()}`: "
                        "give both counts or neither")
    elif has:
        reached = raw["reached"]
        if not isinstance(reached, list):
            problems.append(f"[tree] reached is a {_toml.type_name(reached)}, not an array of counts (one per depth)")
            reached = None
        else:
            bad = [i for i, v in enumerate(reached, 1) if _toml.as_uint(v) is None]
            for i in bad:
                problems.append(f"[tree] reached depth {i} = {_toml.show(reached[i - 1])} is not a count "
                                "(a whole number >= 0)")
            reached = None if bad else reached
        matched = _tree_rows(raw["matched"], "matched", _toml.as_uint, "a count (a whole number >= 0)", problems)
        if reached is not None and matched is not None and a is not None and len(problems) == before:
            found = tree_counts_problems(reached, matched, a)
            problems += [f"[tree] {p}" for p in found]
            if not found:
                counts = TreeCounts(tuple(reached), tuple(tuple(r) for r in matched), "")
    source = raw.get("source", _toml.MISSING)
    if source is not _toml.MISSING:
        if not isinstance(source, str):
            problems.append(f"[tree] source = {_toml.show(source)} is not a string")
        elif not has:
            problems.append("[tree] source names where the counts came from: give `reached` and `matched` with it, "
                            "or drop it")
        elif counts is not None:
            counts = TreeCounts(counts.reached, counts.matched, source)
    if len(problems) != before:
        return None, None
    return a, counts


def _tree_rows(value, name, read, want, problems):
    """A ``[tree]`` array of arrays read cell by cell, every row as long as the first; None (with
    the problems appended) otherwise."""
    if not isinstance(value, list) or not value:
        problems.append(f"[tree] {name} must be a non-empty array of rows (one per depth), got "
                        f"{_toml.show(value)}")
        return None
    out, ok = [], True
    width = len(value[0]) if isinstance(value[0], list) else None
    for d, row in enumerate(value, 1):
        if not isinstance(row, list):
            problems.append(f"[tree] {name} depth {d} is a {_toml.type_name(row)}, not an array (one value per rank)")
            ok = False
            continue
        if width is not None and len(row) != width:
            problems.append(f"[tree] {name} depth {d} has {len(row)} ranks, depth 1 has {width}: "
                            "every row has one value per rank")
            ok = False
            continue
        cells = [read(v) for v in row]
        for r, (v, c) in enumerate(zip(row, cells), 1):
            if c is None:
                problems.append(f"[tree] {name} depth {d} rank {r} = {_toml.show(v)} is not {want}")
                ok = False
        out.append(cells)
    return out if ok else None
