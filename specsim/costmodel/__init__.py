"""Cost tables without hardware: an analytic roofline model over public specs, for
when no hardware is at hand (docs/measure.md#a-table-without-hardware). A modelled table says so in its ``[meta]`` (``energy_source = "model"``)."""

from specsim.costmodel.engines import ENGINE_PROFILES, CustomAllReduce, EngineProfile, engine_profile
from specsim.costmodel.passes import (ACHIEVED, HOST_OVERHEADS, Achieved, ForwardBreakdown, Overheads, achieved_for,
                                      forward_breakdown, plain_decode_ms, plain_decode_power_w)
from specsim.costmodel.roofline import (DEFAULT_CONTEXT_TOKENS, DEFAULT_WIDTHS, Setup, StepParts, model_table,
                                        step_costs, step_parts)
from specsim.costmodel.specs import (BUILTIN_DRAFTERS, BUILTIN_GPUS, BUILTIN_MODELS, DrafterSpec, GpuSpec,
                                     ModelSpec, drafter_spec, gpu_spec, load_specs, model_spec, parse_specs)

__all__ = [
    "ACHIEVED", "Achieved", "BUILTIN_DRAFTERS", "BUILTIN_GPUS", "BUILTIN_MODELS", "CustomAllReduce",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_WIDTHS", "DrafterSpec", "ENGINE_PROFILES", "EngineProfile", "ForwardBreakdown", "GpuSpec",
    "HOST_OVERHEADS", "ModelSpec", "Overheads", "Setup", "StepParts", "achieved_for", "drafter_spec", "engine_profile",
    "forward_breakdown", "gpu_spec", "load_specs", "model_spec", "model_table", "parse_specs", "plain_decode_ms",
    "plain_decode_power_w", "step_costs", "step_parts",
]
