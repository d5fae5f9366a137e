"""Regenerate the sample inputs of the README's tour (run from the repository root).

    python examples/make_examples.py

Every file is seeded, so the output is the same on every machine:

- ``drafter.safetensors``: a tiny but valid safetensors file standing in for a drafter's weights
  (the tour hashes it to fill a calibration's ``weights_sha256``);
- ``drafts.csv``: a synthetic per-draft log (docs/formats.md#per-draft-log): 300 verify steps of
  4 sequences with 4 drafts each; a draft is accepted with a probability that rises with its
  confidence, and drafts after a rejection are logged too, as a serve logs them;
- ``confidences.json``: per-sequence draft confidences of one batch (docs/formats.md#planner-inputs);
- ``trace.csv``: 300 requests in specsim's own CSV layout, from the synthetic generator with the
  shapes of the public Azure conversation trace;
- ``table.toml``: ``specsim table model`` for an H200 running Llama-3.1-8B with an EAGLE drafter;
- ``cal.toml``: ``specsim calib fit`` on ``drafts.csv``;
- ``tree-cal.toml``: the demo's calibration (EAGLE on Llama-3.1-8B, published rates) with a
  ``[tree]`` table of 8 depths: its per-position priors as the rank-1 column (the last repeated)
  and an illustrative falling tail for ranks 2..4 (docs/planner.md#draft-trees).

``runs.toml`` and ``acceptance.toml`` are copies of measured data, not generated here.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
VOCAB = 128256


def drafter_weights() -> bytes:
    """A safetensors file: an 8-byte little-endian header length, a JSON header, the raw data."""
    weights = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    data = weights.tobytes()
    header = json.dumps({"fc.weight": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, len(data)]}},
                        separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the format pads the header to a multiple of 8
    return struct.pack("<Q", len(header)) + header + data


def drafts_log(steps: int = 300, sequences: int = 4, drafts: int = 4) -> str:
    rng = np.random.default_rng(1)
    lines = ["step,sequence,position,confidence,accepted"]
    for step in range(steps):
        for seq in range(sequences):
            for pos in range(1, drafts + 1):
                # Confidences drift lower along a chain; acceptance tracks exp(confidence).
                lp = -rng.exponential(0.25 + 0.2 * pos)
                accepted = int(rng.random() < 0.95 * np.exp(lp))
                conf = "nan" if rng.random() < 0.01 else f"{lp:.4f}"
                lines.append(f"{step},{seq},{pos},{conf},{accepted}")
    return "\n".join(lines) + "\n"


def confidences() -> str:
    batch = [[-0.02, -0.15, -0.6, -1.4], [-0.9, -2.5], [None, -0.05, -0.1], [-0.01, -0.01, -0.02, -0.04],
             [-3.2], [-0.3, -0.4, -0.7, -1.1]]
    return json.dumps(batch) + "\n"


def trace() -> str:
    from specsim.demo import demo_trace

    r = demo_trace(requests=300, seed=1, rate_scale=1.0).requests
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{a:.6f},{p},{o}" for a, p, o in zip(r["arrival_s"].tolist(), r["prompt_tokens"].tolist(),
                                                    r["output_tokens"].tolist())]
    return "\n".join(lines) + "\n"


def tree_calibration() -> str:
    from specsim.demo_inputs import demo_tree_calibration

    return demo_tree_calibration().render()


def specsim(*args) -> None:
    subprocess.run([sys.executable, "-m", "specsim", *args], check=True, cwd=HERE)


def main() -> int:
    (HERE / "drafter.safetensors").write_bytes(drafter_weights())
    (HERE / "drafts.csv").write_text(drafts_log())
    (HERE / "confidences.json").write_text(confidences())
    (HERE / "trace.csv").write_text(trace())
    specsim("table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l",
            "--widths", "1,2,4,8,16,32,64", "--max-k", "6", "-o", "table.toml")
    sha = hashlib.sha256((HERE / "drafter.safetensors").read_bytes()).hexdigest()
    specsim("calib", "fit", "--drafts-log", "drafts.csv", "--drafter-sha256", sha, "--vocab", str(VOCAB),
            "--quantization", "bf16", "--context", "true", "-o", "cal.toml")
    (HERE / "tree-cal.toml").write_text(tree_calibration())
    return 0


if __name__ == "__main__":
    sys.exit(main())
