"""Result types of the simulation domain."""

from __future__ import annotations

from typing import NamedTuple, Optional


class ReplayResult(NamedTuple):
    """What a policy gives when an acceptance trace is replayed at one width (SPEC §5).

    ``joules`` and the per-joule rate are None when the costs have no energy (a ``step_ms`` list).
    ``by_depth[k]`` counts the steps run at depth ``k``.
    """

    trace: str
    policy: str
    width: int
    depth: int
    budget: int
    tokens: int
    steps: int
    plain_steps: int
    by_depth: tuple
    ms: float
    joules: Optional[float]

    @property
    def tokens_per_ms(self) -> float:
        return self.tokens / self.ms if self.ms > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens_per_ms

    @property
    def tokens_per_j(self) -> Optional[float]:
        if self.joules is None:
            return None
        return self.tokens / self.joules if self.joules > 0 else 0.0

    def to_dict(self) -> dict:
        """JSON-ready summary."""
        return {
            "trace": self.trace,
            "policy": self.policy,
            "width": self.width,
            "depth": self.depth,
            "budget": self.budget,
            "tokens": self.tokens,
            "ms": self.ms,
            "joules": self.joules,
            "steps": self.steps,
            "plain_steps": self.plain_steps,
            "by_depth": {str(k): c for k, c in enumerate(self.by_depth) if c},
            "tokens_per_ms": self.tokens_per_ms,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_j": self.tokens_per_j,
        }
