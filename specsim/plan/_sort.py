"""The planner's descending sort of marginal gains: a bucket sort on the float64 bit patterns.

Gains are products of probabilities, so they are finite and >= 0, and a non-negative double
orders as its bit pattern read as an integer (the sign bit cleared: a probability of -0.0, which
a calibration may hold, makes gains of -0.0, equal to 0.0 and sorted with it). One counting pass
on the leading bits of the patterns spreads about one gain per bucket; an insertion pass then
only fixes the order inside buckets. That is linear time for the gains a planner sees, where a
comparison sort of the n * K gains of a batch would cost more than everything else the planner
does.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit

# Buckets of the counting sort: the workspace's ``counts`` holds this many (see plan_workspace).
SORT_BUCKETS = 4096
# Up to this many values, and for buckets up to this size, insertion sort is the fastest.
SMALL_BUCKET = 32
# Insertion sort's moves per value before the crowded buckets are heap-sorted instead.
MOVES_PER_VALUE = 8


# All bits but the sign's: -0.0 keys as 0.0.
MAGNITUDE = 0x7FFFFFFFFFFFFFFF
# Unsigned subscripts: Numba skips its negative-index wraparound for them (most of a pass here).
U = np.uintp


@jit(internal=True)
def _insertion_desc(a, start, stop):
    for t in range(start + 1, stop):
        x = a[U(t)]
        q = t - 1
        while q >= start and a[U(q)] < x:
            a[U(q + 1)] = a[U(q)]
            q -= 1
        a[U(q + 1)] = x


@jit(internal=True)
def _sift_down_min(a, start, root, end):
    """Restore a min-heap on ``a[start:end]`` (heap index ``root``, 0-based from ``start``)."""
    while True:
        child = 2 * root + 1
        if child >= end - start:
            return
        if child + 1 < end - start and a[start + child + 1] < a[start + child]:
            child += 1
        if a[start + child] < a[start + root]:
            x = a[start + root]
            a[start + root] = a[start + child]
            a[start + child] = x
            root = child
        else:
            return


@jit(internal=True)
def _heapsort_desc(a, start, stop):
    """Sort ``a[start:stop]`` descending in place in O(m log m), for a bucket of many distinct
    values packed close together. (Written out rather than ndarray.sort, whose generic quicksort
    costs seconds of compilation.)"""
    m = stop - start
    for root in range(m // 2 - 1, -1, -1):
        _sift_down_min(a, start, root, stop)
    for end in range(m - 1, 0, -1):
        x = a[start]
        a[start] = a[start + end]
        a[start + end] = x
        _sift_down_min(a, start, np.int64(0), start + end)


@jit(internal=True)
def _insertion_bounded(a, start, stop, budget):
    """Insertion sort of ``a[start:stop]`` (descending) that gives up after ``budget`` moves.

    Returns False when it gave up; ``a[start:stop]`` is then a permutation of its input.
    """
    moves = 0
    for t in range(start + 1, stop):
        x = a[U(t)]
        if not a[U(t - 1)] < x:
            continue
        q = t - 1
        while q >= start and a[U(q)] < x:
            a[U(q + 1)] = a[U(q)]
            q -= 1
        a[U(q + 1)] = x
        moves += t - 1 - q
        if moves > budget:
            return False
    return True


@jit
def sort_gains_desc_nb(gains, count, ordered, counts, keys, lowest, highest):
    """``ordered[:count]`` = ``gains[:count]`` sorted descending (gains are finite and >= 0):
    :func:`bucket_gains_desc_nb`, then :func:`sort_buckets_nb` through the last gain.

    Parameters
    ----------
    gains : ndarray(float64, ndim=1), shape >= (count,)
        Finite and >= 0 (-0.0 included).
    count : int
    ordered : ndarray(float64, ndim=1), shape >= (count,)
        Modified in place; must not overlap ``gains[:count]``.
    counts : ndarray(int64, ndim=1), shape >= (SORT_BUCKETS,)
    keys : ndarray(int64, ndim=1), shape >= (count,)
        Workspaces (overwritten).
    lowest, highest : float
        The least and the greatest of ``gains[:count]`` (the caller saw every value already).
    """
    buckets = bucket_gains_desc_nb(gains, count, ordered, counts, keys, lowest, highest)
    sort_buckets_nb(ordered, counts, buckets, np.int64(0), count - 1)


@jit
def bucket_gains_desc_nb(gains, count, ordered, counts, keys, lowest, highest):
    """The sort's first half: ``ordered[:count]`` = ``gains[:count]`` in buckets of descending
    values, each bucket in any order (arguments as :func:`sort_gains_desc_nb`'s).

    A caller that reads only a prefix of the sorted gains (the planner's scan stops where no
    later prefix can pay) sorts only the buckets that prefix reaches, with
    :func:`sort_buckets_nb`.

    Returns
    -------
    int
        The number of buckets, bucket ``b`` being ``ordered[counts[b - 1]:counts[b]]``
        (``counts[-1]`` read as 0); 0 when ``ordered[:count]`` is sorted already.
    """
    if count <= SMALL_BUCKET or lowest == highest:
        for t in range(count):
            ordered[U(t)] = gains[U(t)]
        _insertion_desc(ordered, np.int64(0), count)
        return 0
    bits = gains[:count].view(np.int64)
    # The bit patterns of the extremes, through the counters (no allocation).
    as_float = counts[:2].view(np.float64)
    as_float[0] = lowest + 0.0  # -0.0 + 0.0 is 0.0
    as_float[1] = highest
    umin = counts[0]
    umax = counts[1]
    limit = count if count < SORT_BUCKETS else SORT_BUCKETS
    shift = 0
    while ((umax - umin) >> shift) >= limit:
        shift += 1
    while (umax >> shift) - (umin >> shift) >= limit:
        shift += 1
    top = umax >> shift
    nb = top - (umin >> shift) + 1
    for b in range(nb):
        counts[U(b)] = 0
    # Bucket 0 holds the largest values: the buckets in ascending order are the values descending.
    for e in range(count):
        b = top - ((bits[U(e)] & MAGNITUDE) >> shift)
        keys[U(e)] = b
        counts[U(b)] += 1
    pos = 0
    for b in range(nb):
        c = counts[U(b)]
        counts[U(b)] = pos
        pos += c
    for e in range(count):
        b = U(keys[U(e)])
        ordered[U(counts[b])] = gains[U(e)]
        counts[b] += 1
    return nb  # counts[b] is now the end of bucket b


@jit
def sort_buckets_nb(ordered, counts, buckets, first, through):
    """Sort the buckets of :func:`bucket_gains_desc_nb` from bucket ``first`` on, until
    ``ordered[:through + 1]`` is sorted (the buckets before ``first`` are sorted already).

    Buckets are in order, so one insertion pass over them only moves values inside their
    bucket: linear unless a bucket holds many distinct values packed close together (equal
    values never move). Past ``MOVES_PER_VALUE`` moves a value, the crowded buckets are
    heap-sorted apart and the insertion pass finishes the rest.

    Returns
    -------
    int
        The first bucket left unsorted (``buckets`` when none is).
    """
    # int64, not a literal: a literal would compile the sorts once more each.
    start = counts[U(first - 1)] if first > 0 else np.int64(0)
    if first >= buckets or start > through:
        return first
    last = first
    while last < buckets and counts[U(last)] <= through:
        last += 1
    last = last + 1 if last < buckets else buckets  # through the bucket that holds `through`
    stop = counts[U(last - 1)]
    if _insertion_bounded(ordered, start, stop, MOVES_PER_VALUE * (stop - start)):
        return last
    # counts[b] is the end of bucket b: sort the crowded buckets apart, then finish.
    low = start
    for b in range(first, last):
        high = counts[U(b)]
        if high - low > SMALL_BUCKET:
            _heapsort_desc(ordered, low, high)
        low = high
    _insertion_desc(ordered, start, stop)
    return last
