"""Draft trees (docs/planner.md#draft-trees): the best tree of N nodes for a depth x rank
acceptance table, the expected tokens of any tree, the trees the engines' settings build, and
what a tree's step costs on a cost table."""

from specsim.tree._types import Tree, TreeOrder
from specsim.tree.best import best_tree, expected_tokens, greedy_order
from specsim.tree.engines import tree_from_sglang, tree_from_trtllm, tree_from_vllm
from specsim.tree.pricing import TREE_ATTENTION_FACTOR, TreeCost, tree_step_cost

__all__ = ["TREE_ATTENTION_FACTOR", "Tree", "TreeCost", "TreeOrder", "best_tree", "expected_tokens", "greedy_order",
           "tree_from_sglang", "tree_from_trtllm", "tree_from_vllm", "tree_step_cost"]
