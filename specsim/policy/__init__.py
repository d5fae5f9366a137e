"""What a draft-depth policy is, with no file I/O: :mod:`~specsim.policy.schedule` (width ranges ->
depth: the check, the canonical text, the lookup) and :mod:`~specsim.policy.policy` (the
:class:`Policy` value and :func:`parse_policy`)."""

from specsim.policy.policy import KINDS, Policy, parse_policy, policy_runs, tree_policy
from specsim.policy.schedule import canonical, check_ranges, depth_at, policy_text, ranges_from_depths

__all__ = ["KINDS", "Policy", "canonical", "check_ranges", "depth_at", "parse_policy", "policy_runs", "policy_text",
           "ranges_from_depths", "tree_policy"]
