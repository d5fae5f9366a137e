"""The draft trees the serving engines build from their settings (docs/planner.md#engine-trees).

SGLang's EAGLE (``--speculative-eagle-topk``, ``--speculative-num-steps``,
``--speculative-num-draft-tokens``) and TensorRT-LLM's dynamic trees (``dynamic_tree_max_topK``,
``max_draft_len``, ``max_total_draft_tokens``) choose the tree each step by the draft's
cumulative scores; specsim models those scores by the path products of the rank-acceptance table
(a well-calibrated drafter's scores are its acceptance), so the tree each converter returns is
the engine's tree on a step whose scores follow the table. vLLM's ``speculative_token_tree``
is the tree itself.
"""

from __future__ import annotations

import ast

from specsim._checks import MAX_TREE_DEPTH, MAX_TREE_NODES, MAX_TREE_RANKS, int_problem, is_int, show
from specsim.errors import TreeError
from specsim.tree._types import Tree
from specsim.tree.best import checked_rank_acceptance, expected_tokens

# The longest speculative_token_tree string read: 256 nodes of 64 ranks each, written out.
MAX_TREE_TEXT = 1 << 20

SGLANG_FIELDS = {"topk": "--speculative-eagle-topk", "steps": "--speculative-num-steps",
                 "draft_tokens": "--speculative-num-draft-tokens"}
TRTLLM_FIELDS = {"max_topk": "dynamic_tree_max_topK", "max_draft_len": "max_draft_len",
                 "max_total_draft_tokens": "max_total_draft_tokens"}


def _field(value, name, label, low, high, why=""):
    problem = int_problem(value, f"{name} ({label})", low, high, why)
    if problem:
        raise TreeError(problem)
    return int(value)


def _key(path, product):
    """The best-tree order (specsim.tree.best): larger product, then the rank path."""
    return (-product, path)


def _beam_tree(a, topk, steps, nodes, pool_all):
    """EAGLE-2's tree on path products: a beam of ``topk`` paths per level, each expanding its
    ``topk`` best ranks, the best ``topk`` expansions the next beam; then the best ``nodes`` of
    the pool: every expansion (``pool_all``, SGLang) or the beams only (TensorRT-LLM)."""
    level = [((r,), float(a[0, r - 1])) for r in range(1, topk + 1)]
    pool = list(level)
    beam = sorted(level, key=lambda e: _key(*e))[:topk]
    for d in range(2, steps + 1):
        grown = [(path + (r,), prod * float(a[d - 1, r - 1])) for path, prod in beam for r in range(1, topk + 1)]
        beam = sorted(grown, key=lambda e: _key(*e))[:topk]
        pool += grown if pool_all else beam
    chosen = sorted(pool, key=lambda e: _key(*e))[:nodes]
    return _tree_of_paths([p for p, _ in chosen], a)


def _tree_of_paths(paths, a=None) -> Tree:
    """The tree of ``paths`` (1-based rank tuples, each after its parent), with its expected
    tokens under ``a`` when given (products summed in node order)."""
    index = {}
    parents, ranks = [], []
    for path in paths:
        index[path] = len(parents)
        parents.append(index[path[:-1]] if len(path) > 1 else -1)
        ranks.append(path[-1])
    if a is None:
        return Tree(tuple(parents), tuple(ranks))
    return Tree(tuple(parents), tuple(ranks), expected_tokens(a, parents, ranks))


def _table_fits(a, ranks, depth, rank_label, depth_label):
    if ranks > a.shape[1]:
        raise TreeError(f"{rank_label} = {ranks} is more than the rank-acceptance table's {a.shape[1]} ranks: "
                        "fit more ranks or give a smaller top-k")
    if depth > a.shape[0]:
        raise TreeError(f"{depth_label} = {depth} is deeper than the rank-acceptance table's {a.shape[0]} depths: "
                        "fit deeper rows or give fewer steps")


def tree_from_sglang(topk: int, steps: int, draft_tokens: int, rank_acceptance=None) -> Tree:
    """The tree SGLang's EAGLE verifies under ``--speculative-eagle-topk topk
    --speculative-num-steps steps --speculative-num-draft-tokens draft_tokens``.

    Each of ``steps`` levels expands the ``topk`` best ranks of each of the previous level's
    ``topk`` best paths (a pool of ``topk + (steps - 1) * topk**2`` candidates); the target
    verifies the best ``draft_tokens - 1`` of the pool (the root is the other token). With
    ``topk = 1`` SGLang sets ``draft_tokens = steps + 1``: the chain of ``steps`` drafts, which
    needs no table.

    Parameters
    ----------
    topk : int
        1..16.
    steps : int
        1..64.
    draft_tokens : int
        2..257, at most ``topk + (steps - 1) * topk**2 + 1`` (replaced by ``steps + 1`` with
        ``topk = 1``).
    rank_acceptance : array_like of float, shape (D, R), optional
        Needed when ``topk > 1``; ``topk <= R`` and ``steps <= D``. With it, the tree carries
        its expected tokens.

    Raises
    ------
    TreeError
        Naming the flag: a value out of range, more draft tokens than the pool holds, a top-k
        or step count past the table.
    """
    topk = _field(topk, "topk", SGLANG_FIELDS["topk"], 1, MAX_TREE_RANKS, "the most ranks a tree may use")
    steps = _field(steps, "steps", SGLANG_FIELDS["steps"], 1, MAX_TREE_DEPTH, "the deepest a tree may go")
    draft_tokens = _field(draft_tokens, "draft_tokens", SGLANG_FIELDS["draft_tokens"], 2, MAX_TREE_NODES + 1,
                          "the root and the most nodes a tree may hold")
    if topk == 1:
        a = None if rank_acceptance is None else checked_rank_acceptance(rank_acceptance)
        if a is not None:
            _table_fits(a, 1, steps, f"topk ({SGLANG_FIELDS['topk']})", f"steps ({SGLANG_FIELDS['steps']})")
        return _tree_of_paths([(1,) * d for d in range(1, steps + 1)], a)
    pool = topk + (steps - 1) * topk * topk
    if draft_tokens - 1 > pool:
        raise TreeError(f"draft_tokens ({SGLANG_FIELDS['draft_tokens']}) = {draft_tokens} asks for "
                        f"{draft_tokens - 1} nodes, more than top-k {topk} over {steps} steps drafts "
                        f"({pool}): give at most {pool + 1}")
    if rank_acceptance is None:
        raise TreeError(f"topk ({SGLANG_FIELDS['topk']}) = {topk} builds its tree by draft scores: give a "
                        "rank_acceptance table to model them")
    a = checked_rank_acceptance(rank_acceptance)
    _table_fits(a, topk, steps, f"topk ({SGLANG_FIELDS['topk']})", f"steps ({SGLANG_FIELDS['steps']})")
    return _beam_tree(a, topk, steps, draft_tokens - 1, pool_all=True)


def tree_from_trtllm(max_topk: int, max_draft_len: int, max_total_draft_tokens=None, rank_acceptance=None) -> Tree:
    """The tree TensorRT-LLM's dynamic tree (Eagle3) verifies under ``dynamic_tree_max_topK =
    max_topk``, ``max_draft_len`` and ``max_total_draft_tokens``.

    Each of ``max_draft_len`` layers keeps the ``max_topk`` best expansions of the previous
    layer's (``max_topk`` ranks each): ``max_topk * max_draft_len`` drafted tokens, of which the
    target verifies the best ``max_total_draft_tokens`` (``max_draft_len <= budget <= max_topk *
    max_draft_len``, default the whole ``max_topk * max_draft_len``).

    Raises
    ------
    TreeError
        Naming the field, as :func:`tree_from_sglang`.
    """
    topk = _field(max_topk, "max_topk", TRTLLM_FIELDS["max_topk"], 1, MAX_TREE_RANKS, "the most ranks a tree may use")
    depth = _field(max_draft_len, "max_draft_len", TRTLLM_FIELDS["max_draft_len"], 1, MAX_TREE_DEPTH,
                   "the deepest a tree may go")
    drafted = topk * depth
    budget = drafted if max_total_draft_tokens is None else max_total_draft_tokens
    budget = _field(budget, "max_total_draft_tokens", TRTLLM_FIELDS["max_total_draft_tokens"], 1, MAX_TREE_NODES,
                    "the most nodes a tree may hold")
    if not depth <= budget <= drafted:
        raise TreeError(f"max_total_draft_tokens = {budget} must be between max_draft_len ({depth}) and "
                        f"dynamic_tree_max_topK x max_draft_len ({drafted})")
    if rank_acceptance is None:
        if topk == 1:
            return _tree_of_paths([(1,) * d for d in range(1, depth + 1)])
        raise TreeError(f"max_topk ({TRTLLM_FIELDS['max_topk']}) = {topk} builds its tree by draft scores: give "
                        "a rank_acceptance table to model them")
    a = checked_rank_acceptance(rank_acceptance)
    _table_fits(a, topk, depth, f"max_topk ({TRTLLM_FIELDS['max_topk']})", "max_draft_len")
    return _beam_tree(a, topk, depth, budget, pool_all=False)


def _parse_vllm(text):
    if isinstance(text, str):
        if len(text) > MAX_TREE_TEXT:
            raise TreeError(f"speculative_token_tree is {len(text):,} characters: a tree of at most "
                            f"{MAX_TREE_NODES} nodes is far shorter")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
            reason = type(e).__name__ if not str(e) else str(e).splitlines()[0]
            raise TreeError(f"speculative_token_tree {show(text)} is not a Python list of rank tuples such as "
                            f"\"[(0,), (1,), (0, 0)]\" ({reason})") from None
    else:
        value = text
    if not isinstance(value, (list, tuple)):
        raise TreeError(f"speculative_token_tree must be a list of rank tuples such as \"[(0,), (1,), (0, 0)]\", "
                        f"got {show(value)}")
    return list(value)


def tree_from_vllm(speculative_token_tree, rank_acceptance=None) -> Tree:
    """The tree of vLLM's ``speculative_config.speculative_token_tree``: a list of node paths,
    each a tuple of 0-based ranks from the root, e.g. ``"[(0,),(1,),(0,0),(1,0)]"`` (read as a
    Python literal, never run). vLLM sorts it breadth-first (by depth, then path); so does this.

    Parameters
    ----------
    speculative_token_tree : str or sequence of tuples of int
    rank_acceptance : array_like of float, shape (D, R), optional
        With it, the tree carries its expected tokens (its ranks and depth must fit the table).

    Raises
    ------
    TreeError
        Bad syntax, a path that is not a tuple of ranks 0..15, an empty or repeated path, a
        path whose parent is missing, more than 256 nodes or deeper than 64.
    """
    items = _parse_vllm(speculative_token_tree)
    if not items:
        raise TreeError("speculative_token_tree is empty: give at least one node, e.g. \"[(0,)]\"")
    if len(items) > MAX_TREE_NODES:
        raise TreeError(f"speculative_token_tree has {len(items)} nodes: at most {MAX_TREE_NODES} "
                        "(see docs/limits.md)")
    paths = []
    for i, item in enumerate(items):
        if not isinstance(item, tuple) or not item:
            raise TreeError(f"speculative_token_tree node {i} = {show(item)} must be a non-empty tuple of ranks "
                            "such as (0, 1)")
        if len(item) > MAX_TREE_DEPTH:
            raise TreeError(f"speculative_token_tree node {i} is at depth {len(item)}: at most {MAX_TREE_DEPTH}")
        for r in item:
            if not is_int(r) or not 0 <= r < MAX_TREE_RANKS:
                raise TreeError(f"speculative_token_tree node {i} = {show(item)}: rank {show(r)} must be a whole "
                                f"number in 0..{MAX_TREE_RANKS - 1} (0 = the draft's top candidate)")
        paths.append(tuple(int(r) + 1 for r in item))
    seen = set()
    for i, path in enumerate(paths):
        if path in seen:
            raise TreeError(f"speculative_token_tree node {i} = {show(items[i])} is listed twice")
        seen.add(path)
    for i, path in enumerate(paths):
        if len(path) > 1 and path[:-1] not in seen:
            parent = tuple(r - 1 for r in path[:-1])
            raise TreeError(f"speculative_token_tree node {i} = {show(items[i])} has no parent {parent} in the "
                            "tree: list every prefix of a path")
    paths.sort(key=lambda p: (len(p), p))
    a = None if rank_acceptance is None else checked_rank_acceptance(rank_acceptance)
    return _tree_of_paths(paths, a)
