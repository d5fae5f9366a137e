"""A planned draft tree as each engine's settings (docs/planner.md#draft-trees).

vLLM takes any tree as a list of rank paths (``speculative_token_tree``), so its setting is always
the tree itself. SGLang (``--speculative-eagle-topk``, ``--speculative-num-steps``,
``--speculative-num-draft-tokens``) and TensorRT-LLM's dynamic trees (``dynamic_tree_max_topK``,
``max_draft_len``, ``max_total_draft_tokens``) build their tree from three numbers: the settings
below draft as many levels and verify as many nodes as the planned tree, with the top-k whose tree
(:func:`~specsim.tree.tree_from_sglang`, :func:`~specsim.tree.tree_from_trtllm`) is the planned
one, or, where none is, the top-k whose tree has the most expected tokens, saying what differs.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from specsim.errors import PlanError
from specsim.tree.engines import tree_from_sglang, tree_from_trtllm

ENGINES = ("vllm", "sglang", "trtllm")

# vLLM releases differ in how they verify a branching tree: one audited release verified it as a
# flattened chain (about one accepted token per step). Said with every branching vLLM setting.
VLLM_BRANCHING_NOTE = ("check that your vLLM release verifies branching trees as trees: one release verified "
                       "them as a flattened chain")


class EngineSetting(NamedTuple):
    """One engine's settings for a planned tree.

    engine : str
        ``"vllm"``, ``"sglang"`` or ``"trtllm"``.
    fields : tuple of (str, object)
        The settings, by the engine's own names, in the order the engine's docs give them; empty
        for plain decoding (no speculative settings at all).
    exact : bool
        The engine's tree with these settings is the planned tree (as a set of rank paths).
    expected_tokens : float
        Expected tokens per sequence per step of the engine's tree (the planned tree's when
        ``exact``); NaN where no setting of the engine drafts as many nodes.
    differs : str
        What differs from the planned tree when not ``exact``; ``""`` otherwise.
    note : str
        A caveat to print with the setting, or ``""``.
    """

    engine: str
    fields: tuple
    exact: bool
    expected_tokens: float
    differs: str = ""
    note: str = ""

    def line(self) -> str:
        """The settings as one line, as the engine's users write them."""
        if not self.fields:
            return "no speculative decoding" if self.exact else "no setting drafts this tree"
        if self.engine == "sglang":
            return " ".join(f"--speculative-{name.replace('_', '-')} {value}" for name, value in self.fields)
        if self.engine == "vllm":
            # The JSON --speculative-config takes (beside the method and the draft model).
            return f"--speculative-config '{json.dumps(dict(self.fields))}'"
        # The Eagle3 decoding config's fields as its YAML spells them.
        return ", ".join(f"{name}: {_yaml(value)}" for name, value in self.fields)

    def to_dict(self) -> dict:
        """A JSON-ready dict (``expected_tokens`` null where no setting drafts the tree)."""
        return {"fields": {name: value for name, value in self.fields}, "exact": self.exact,
                "expected_tokens": None if self.expected_tokens != self.expected_tokens else self.expected_tokens,
                "differs": self.differs, "note": self.note}


def _yaml(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def rank_paths(tree) -> list:
    """Each node's path from the root as 0-based ranks (vLLM's spelling), in the tree's order.

    ``tree`` : a :class:`~specsim.tree.Tree` (``parents`` before children, ``ranks`` 1-based).
    """
    paths = []
    for parent, rank in zip(tree.parents, tree.ranks):
        paths.append((paths[parent] if parent >= 0 else ()) + (int(rank) - 1,))
    return paths


def vllm_token_tree(tree) -> str:
    """vLLM's ``speculative_token_tree`` for ``tree``: its rank paths breadth first (vLLM sorts
    them so), e.g. ``"[(0,), (1,), (0, 0)]"``."""
    return "[" + ", ".join(str(p) for p in sorted(rank_paths(tree), key=lambda p: (len(p), p))) + "]"


def vllm_settings(tree) -> EngineSetting:
    """vLLM's settings for ``tree``: exact for any tree (a chain needs no tree string)."""
    if tree.nodes == 0:
        return EngineSetting("vllm", (), True, 1.0)
    fields = (("num_speculative_tokens", tree.nodes),)
    if not tree.is_chain:
        fields += (("speculative_token_tree", vllm_token_tree(tree)),)
    return EngineSetting("vllm", fields, True, tree.expected_tokens,
                         note="" if tree.is_chain else VLLM_BRANCHING_NOTE)


def sglang_settings(tree, rank_acceptance) -> EngineSetting:
    """SGLang's EAGLE flags for ``tree``: ``num_draft_tokens`` its nodes + 1 (the root),
    ``num_steps`` its depth and the ``eagle_topk`` whose tree is ``tree``, else the closest (see
    :func:`_search`).

    rank_acceptance : ndarray(float64, ndim=2), shape (D, R)
        The calibration's rank acceptance, which SGLang's path scores stand for.
    """
    if tree.nodes == 0:
        return EngineSetting("sglang", (), True, 1.0)
    if tree.is_chain:
        return EngineSetting("sglang", _sglang_fields(1, tree.nodes, tree.nodes + 1), True, tree.expected_tokens)

    def build(topk, steps):
        # SGLang's pool holds topk + (steps - 1) * topk^2 candidates.
        if tree.nodes > topk + (steps - 1) * topk * topk:
            return None
        return tree_from_sglang(topk, steps, tree.nodes + 1, rank_acceptance)

    found = _search(tree, rank_acceptance, build)
    if found is None:
        d, r = rank_acceptance.shape
        return _undrafted("sglang", tree, rank_acceptance, r + (d - 1) * r * r)
    topk, steps, built = found
    return _setting("sglang", _sglang_fields(topk, steps, tree.nodes + 1), tree, built)


def _sglang_fields(topk, steps, draft_tokens) -> tuple:
    return (("eagle_topk", topk), ("num_steps", steps), ("num_draft_tokens", draft_tokens))


def trtllm_settings(tree, rank_acceptance) -> EngineSetting:
    """TensorRT-LLM's dynamic-tree fields for ``tree`` (Eagle3 decoding config): a chain is linear
    drafting (``use_dynamic_tree: false``); a branching tree ``max_total_draft_tokens`` its nodes,
    ``max_draft_len`` its depth and the ``dynamic_tree_max_topK`` whose tree is ``tree``, else the
    closest (see :func:`_search`)."""
    if tree.nodes == 0:
        return EngineSetting("trtllm", (), True, 1.0)
    if tree.is_chain:
        return EngineSetting("trtllm", (("use_dynamic_tree", False), ("max_draft_len", tree.nodes)), True,
                             tree.expected_tokens)

    def build(topk, depth):
        # TensorRT-LLM's rule: max_draft_len <= max_total_draft_tokens <= topK x max_draft_len.
        if tree.nodes > topk * depth:
            return None
        return tree_from_trtllm(topk, depth, tree.nodes, rank_acceptance)

    found = _search(tree, rank_acceptance, build)
    if found is None:
        return _undrafted("trtllm", tree, rank_acceptance, rank_acceptance.shape[0] * rank_acceptance.shape[1])
    topk, depth, built = found
    fields = (("use_dynamic_tree", True), ("dynamic_tree_max_topK", topk), ("max_draft_len", depth),
              ("max_total_draft_tokens", tree.nodes))
    return _setting("trtllm", fields, tree, built)


def engine_settings(tree, rank_acceptance) -> tuple:
    """The three engines' settings for ``tree``, in :data:`ENGINES` order."""
    return (vllm_settings(tree), sglang_settings(tree, rank_acceptance), trtllm_settings(tree, rank_acceptance))


def _search(tree, rank_acceptance, build):
    """``(topk, depth, engine tree)`` or None: at the tree's own depth (else the shallowest
    deeper one the table has where the engine drafts as many nodes at all), over top-k 2..R, the
    smallest top-k whose tree is ``tree``, else the one with the most expected tokens (the smaller
    top-k of equals). ``build(topk, depth)`` is the engine's tree, or None where the engine's rule
    refuses the pair for this many nodes.

    The tree's own depth is enough when the engine drafts that many nodes there: an engine's
    candidate pool only grows with more levels or a larger top-k, and a pool holding every node of
    ``tree`` (the best nodes of all paths) verifies exactly ``tree``; a deeper setting would draft
    passes the planned tree's price leaves out.
    """
    want = set(rank_paths(tree))
    depths, ranks = rank_acceptance.shape
    for depth in range(tree.depth, depths + 1):
        best = None
        for topk in range(2, ranks + 1):
            try:
                built = build(topk, depth)
            except PlanError:
                built = None  # a pair the converter refuses for this tree's budget: not a candidate
            if built is None:
                continue
            if set(rank_paths(built)) == want:
                return topk, depth, built
            if best is None or built.expected_tokens > best[2].expected_tokens:
                best = (topk, depth, built)
        if best is not None:
            return best
    return None


def _undrafted(engine, tree, rank_acceptance, most) -> EngineSetting:
    d, r = rank_acceptance.shape
    return EngineSetting(engine, (), False, float("nan"),
                         f"it drafts at most {most} nodes from a rank table of {d} depths x {r} ranks, not "
                         f"{tree.nodes}: plan fewer nodes (--max-nodes) or fit more ranks or depths")


def _setting(engine, fields, tree, built) -> EngineSetting:
    want, got = rank_paths(tree), set(rank_paths(built))
    if got == set(want):
        return EngineSetting(engine, fields, True, tree.expected_tokens)
    missing = [p for p in want if p not in got]
    extra = [p for p in rank_paths(built) if p not in set(want)]
    differs = (f"its tree differs in {len(missing)} of {tree.nodes} nodes: without {_paths(missing)}, "
               f"with {_paths(extra)}; E[tokens] {built.expected_tokens:.3f} against {tree.expected_tokens:.3f}")
    return EngineSetting(engine, fields, False, built.expected_tokens, differs)


def _paths(paths, shown: int = 3) -> str:
    text = " ".join(str(p).replace(" ", "") for p in paths[:shown])
    return text + (f" and {len(paths) - shown} more" if len(paths) > shown else "")

