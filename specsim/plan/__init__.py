"""Draft-depth planning: how many drafts to propose and to verify (docs/planner.md)."""

from specsim.plan._explain import TABLE_ENDS, DepthFigures, ProposeExplanation, depth_reach, reach_lines
from specsim.plan._types import TreePlan
from specsim.plan.planner import (
    Planner,
    SpecCostState,
    check_slack,
    goodput_depth,
    propose_depth,
    ragged_confidences,
    sequence_depths,
)

__all__ = ["TABLE_ENDS", "DepthFigures", "Planner", "ProposeExplanation", "SpecCostState", "TreePlan", "check_slack",
           "depth_reach", "goodput_depth", "propose_depth", "ragged_confidences", "reach_lines", "sequence_depths"]
