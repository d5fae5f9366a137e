"""What every engine's config export shares: the config value, the limits no engine can be
told, the constant-schedule rule and small readers."""

from __future__ import annotations

from dataclasses import dataclass

from specsim.errors import PolicyError, ScheduleError
from specsim.policy.schedule import policy_text
from specsim._io import loads_json

# What none of the engines can be told, whatever the schedule.
COMMON_LIMITS = (
    "one depth for the whole batch: per-sequence depths (specsim's sequence policy) cannot be expressed",
    "the engine does not read energy or the cost table: the depths stay what was tuned here; tune again "
    "when the traffic, the model or the box changes",
)


@dataclass(frozen=True)
class EngineConfig:
    """A schedule written for one engine.

    Attributes
    ----------
    engine : str
        ``vllm``, ``trtllm`` or ``sglang``.
    text : str
        The file's content (JSON or YAML), ending in a newline.
    notes : tuple of str
        What the engine cannot express or how it reads the file differently from specsim.
    usage : str
        How to hand the file to the engine.
    """

    engine: str
    text: str
    notes: tuple
    usage: str


def deepest_depth(c, engine) -> int:
    """The deepest depth of canonical ``c``, refused when it never speculates."""
    k = max(k for _, _, k in c)
    if k == 0:
        raise ScheduleError(f"{policy_text(c)} never speculates: serve without speculative decoding instead of "
                            f"writing a {engine} schedule")
    return k


def constant_depth(c):
    """The one depth a canonical schedule gives every width, or None when it varies (a schedule
    that plain-decodes above some width is not constant)."""
    return c[0][2] if len(c) == 1 else None


CONSTANT_NOTE = ("the schedule is one depth at every width: written as the engine's plain static setting, since a "
                 "per-batch schedule costs CUDA-graph coverage even when constant")


def load_json(text, source, engine):
    return loads_json(text, f"a {engine} config", source, PolicyError)
