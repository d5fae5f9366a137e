"""Digests of the separate-prefill engine's results, pinned so later engine changes prove they
leave that mode bit for bit unchanged (see docs/simulation.md, "Continuity").

Run ``python -m tests.sim.engine_continuity --write DATA_DIR`` to regenerate the pinned file; the
test only ever reads it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from tests.fixtures import ROOT

PINNED = ROOT / "tests" / "data" / "engine_continuity.json"
# The demo's step costs as the first engine priced them (the roofline before its recalibration on
# measured per-operator profiles), frozen so that re-pricing the model leaves the pin alone.
DEMO_TABLE = ROOT / "tests" / "data" / "engine_continuity_demo_table.toml"
DEMO_REQUESTS = 1500
# Explicit server costs, so the pin does not move when the demo's own defaults do.
DEMO_OPTIONS = {"prefill_ms_per_token": 0.027, "prefill_j_per_token": 0.019, "idle_w": 75.0}
CONV_OPTIONS = {"prefill_ms_per_token": 0.5, "prefill_j_per_token": 0.03}
DEMO_POLICIES = ("fixed:0", "fixed:3", "schedule:1-16=4,17-64=3,65-128=2,129-=1", "goodput", "propose", "sequence")
CONV_POLICIES = ("fixed:0", "fixed:3", "propose", "sequence")


def digest(res) -> dict:
    """Every figure of a result as exact text: array hashes and floats in hex."""
    h = hashlib.sha256()
    for a in (res.first_token_s, res.finish_s, res.depth_histogram, res.step_t_s, res.step_width,
              res.step_mean_depth, res.step_tokens):
        h.update(np.ascontiguousarray(a).tobytes())
    core = ("decode_steps", "prefill_steps", "speculative_steps", "sequence_steps", "emitted_tokens",
            "accepted_drafts", "drafted", "verified_rows")
    return {
        "arrays_sha256": h.hexdigest(),
        "counters": {k: int(res.counters[k]) for k in core},
        "energy": {k: float(res.energy[k]).hex() for k in ("decode_j", "prefill_j", "idle_j", "decode_s",
                                                          "prefill_s", "idle_s")},
        "end_s": float(res.end_s).hex(),
        "step_log_stride": int(res.step_log_stride),
    }


def demo_case():
    from specsim.demo_inputs import demo_calibration
    from specsim.demo import demo_trace
    from specsim.table import CostTable

    # The step costs alone: the [meta] serving figures came later and must not enter the pin.
    return demo_trace(DEMO_REQUESTS).requests, CostTable.load(DEMO_TABLE), demo_calibration()


def conv_case(shared_data):
    from specsim.traces import read_trace
    from tests.fixtures import gb10

    table, cal = gb10(shared_data)
    read = read_trace(shared_data / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv")
    return read.requests, table, cal


def compute(shared_data, extra=None) -> dict:
    """Digests of every pinned case; ``extra`` adds server options (the ones that must not
    change anything in separate-prefill mode)."""
    from specsim.sim import simulate

    extra = extra or {}
    out = {"demo": {}, "conv": {}}
    reqs, table, cal = demo_case()
    for p in DEMO_POLICIES:
        out["demo"][p] = digest(simulate(reqs, table, cal, p, **DEMO_OPTIONS, **extra))
    reqs, table, cal = conv_case(shared_data)
    for p in CONV_POLICIES:
        out["conv"][p] = digest(simulate(reqs, table, cal, p, **CONV_OPTIONS, **extra))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--write":
        sys.exit("usage: python -m tests.sim.engine_continuity --write DATA_DIR")
    PINNED.write_text(json.dumps(compute(Path(sys.argv[2])), indent=1, sort_keys=True) + "\n")
