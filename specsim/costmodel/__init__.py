"""Cost tables without hardware: an analytic roofline model over public specs, for
when no hardware is at hand (docs/measure.md#a-table-without-hardware). A modelled table says so in its ``[meta]`` (``energy_source = "model"``)."""

from specsim.costmodel.roofline import (DEFAULT_CONTEXT_TOKENS, DEFAULT_WIDTHS, Overheads, model_table,
                                        plain_decode_ms, plain_decode_power_w, step_costs)
from specsim.costmodel.specs import (BUILTIN_DRAFTERS, BUILTIN_GPUS, BUILTIN_MODELS, DrafterSpec, GpuSpec,
                                     ModelSpec, drafter_spec, gpu_spec, load_specs, model_spec, parse_specs)

__all__ = [
    "BUILTIN_DRAFTERS", "BUILTIN_GPUS", "BUILTIN_MODELS", "DEFAULT_CONTEXT_TOKENS", "DEFAULT_WIDTHS",
    "DrafterSpec", "GpuSpec", "ModelSpec", "Overheads", "drafter_spec", "gpu_spec", "load_specs",
    "model_spec", "model_table", "parse_specs", "plain_decode_ms", "plain_decode_power_w", "step_costs",
]
