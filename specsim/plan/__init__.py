"""Draft-depth planning (SPEC §4)."""

from specsim.plan.planner import (
    Planner,
    SpecCostState,
    check_slack,
    goodput_depth,
    propose_depth,
    ragged_confidences,
    sequence_depths,
)

__all__ = ["Planner", "SpecCostState", "check_slack", "goodput_depth", "propose_depth", "ragged_confidences",
           "sequence_depths"]
