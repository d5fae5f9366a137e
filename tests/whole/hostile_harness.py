"""A reusable hostile-input run over specsim's readers, writers and options.

Run it from the repository root (``python -m tests.whole.hostile_harness``; ``--json FILE`` keeps every
case's outcome, ``-k TEXT`` runs the cases whose name holds TEXT). Each case runs the command
line in this process, in a fresh folder, under a watchdog, and is put in one class:

- ``crash``: an exception escaped the command line (a traceback), or an exit code other than
  0, 2 or 130;
- ``damaged``: a file that was there before changed although the command failed, or an input
  changed at all;
- ``hang``: the watchdog fired (``WATCHDOG_S`` seconds);
- ``wrong``: the case holds impossible data or names an input as an output, and the command
  exited 0;
- ``ok``: refused with exit code 2 and a ``specsim: error:`` line, or accepted where that is
  right.

The cases cross every file slot of the newer commands (context-aware and telemetry-fitted
tables, engine configs and the controller policies, prefill curves, fleets, schedules, draft
trees and their calibrations, modelled tables from a config.json, published comparisons, NVML
logs) with damaged contents (binary, UTF-16, empty, a 2 MB line, deep JSON, NaN, a FIFO, a
device, a folder); give the newer formats (a published set, a config.json, a draft-tree drafts
log, a [tree] table) one wrong value or row each; pass numeric options values of the wrong type
or size and policies (slack forms included) hostile arguments; and name outputs that are one of
the inputs (also through a symlink).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.fixtures import ROOT

WATCHDOG_S = 30


class Watchdog(BaseException):
    """Raised by SIGALRM: not an OSError, so no command catches it as a file error."""


# -- the folder every case starts from ------------------------------------------------------------

def base_files(d: Path) -> None:
    from specsim.demo_inputs import demo_calibration, demo_table
    from tests.measure.test_engine_tables import grid_docs

    (d / "t.toml").write_text(demo_table().to_text())
    (d / "c.toml").write_text(demo_calibration().render())
    # under the drafter key the cases' --drafter-sha256 and --vocab give (calib import --tree checks it)
    (d / "ct.toml").write_text(demo_calibration().with_rank_acceptance([[0.79, 0.1, 0.04], [0.74, 0.1, 0.04]]).render()
                               .replace(f'"{demo_calibration().drafter.weights_sha256}"', f'"{"ab" * 32}"')
                               .replace(f"vocab = {demo_calibration().drafter.vocab}", "vocab = 9"))
    (d / "tiny.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                + "".join(f"{i * 0.2:.3f},{100 + i},{20 + i % 7}\n" for i in range(40)))
    (d / "v.json").write_text('{"method": "eagle", "num_speculative_tokens": 3, '
                              '"num_speculative_tokens_per_batch_size": [[1, 64, 3]]}\n')
    (d / "s.json").write_text('{"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}}\n')
    (d / "tr.yaml").write_text("speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"
                               "  draft_len_schedule: {4: 3, 16: 1}\n")
    (d / "curve.csv").write_text("tokens,ms,j\n128,5.0,2.0\n1024,20.0,9.0\n")
    (d / "sched.toml").write_text("schema = 1\nobjective = \"energy\"\n[[range]]\nfirst = 1\nlast = 8\ndepth = 3\n"
                                  "[[range]]\nfirst = 9\ndepth = 1\n")
    (d / "fleet.toml").write_text('[[group]]\nname = "a"\ncount = 2\ntable = "t.toml"\ncalibration = "c.toml"\n')
    (d / "iters.jsonl").write_text("\n".join(json.dumps(x) for x in grid_docs()) + "\n")
    (d / "conf.json").write_text("[[-0.1, -0.5], [-0.2]]\n")
    (d / "pub.csv").write_text(PUBLISHED)
    (d / "tlog.csv").write_text(TREE_LOG)
    (d / "hf.json").write_text(json.dumps(HF_CONFIG) + "\n")
    (d / "acc.toml").write_text('step_ms = [1.0, 1.5]\n[[trace]]\nname = "a"\nk_logged = 1\n'
                                'steps = ["0110101101"]\n')


# A published set (tests/data/published-sd's columns), a draft-tree drafts log (rank and parent
# columns) and a Hugging Face config.json of a dense decoder.
PUBLISHED = ("set,engine,gpu,tp,model,method,spec_tokens,tree,batch_or_concurrency,metric,value,unit,baseline_value,"
             "acceptance_length,source\n"
             + "".join(f"R9,vLLM,H200,1,m,EAGLE,3,chain,{b},TPOT,{4 + b / 8:.2f},ms,{6 + b / 8:.2f},2.5,x\n"
                       for b in (1, 2, 4, 8)))
TREE_LOG = "step,sequence,position,confidence,accepted,rank,parent\n" + "".join(
    f"{s},0,1,-0.1,{int(s % 3 != 0)},1,-1\n{s},0,1,-0.9,{int(s % 3 == 0)},2,-1\n{s},0,2,-0.2,{int(s % 2 == 0)},1,0\n"
    for s in range(150))
HF_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu", "torch_dtype": "bfloat16",
             "tie_word_embeddings": False}


# -- damaged contents for any file slot -----------------------------------------------------------

CONTENTS = {
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10,
    "utf16": "tokens,ms,j\n1,2,3\n".encode("utf-16"),
    "empty": b"",
    "2MB line": b"x" * 2_000_000,
    "deep json": b"[" * 50_000 + b"]" * 50_000,
    "nan json": b'{"a": NaN, "1": {"candidate_steps": [NaN]}}',
    "huge ints": b'{"1": {"candidate_steps": [' + b"9" * 5000 + b"]}}",
    "not utf8": b"tokens,ms,j\n1,\xff\xfe,3\n",
    "control chars": "name = \"a\x1b[31mred\x07\"\n".encode(),
    "toml garbage": b"[[[[ = = \n",
}
SPECIAL = ("fifo", "/dev/zero", "folder", "missing", "symlink loop")

SLOTS = {
    "table show": ["table", "show", "{f}"],
    "table query ctx": ["table", "query", "{f}", "4", "2", "--context", "1000"],
    "calib show": ["calib", "show", "{f}"],
    "simulate --trace": ["simulate", "--trace", "{f}", "--table", "t.toml", "--calibration", "c.toml",
                         "--policy", "fixed:1", "--quiet"],
    "simulate --table": ["simulate", "--trace", "tiny.csv", "--table", "{f}", "--calibration", "c.toml",
                         "--policy", "fixed:1", "--quiet"],
    "simulate --prefill-curve": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                 "--policy", "fixed:1", "--prefill-curve", "{f}", "--quiet"],
    "simulate vllm:": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                       "--policy", "vllm:{f}", "--quiet"],
    "simulate sglang[1,4]:": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                              "--policy", "sglang[1,4]:{f}", "--quiet"],
    "simulate trtllm:": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                         "--policy", "trtllm:{f}", "--quiet"],
    "fleet --fleet": ["fleet", "--trace", "tiny.csv", "--fleet", "{f}", "--policy", "fixed:1"],
    "schedule import vllm": ["schedule", "import", "--from", "vllm", "{f}"],
    "schedule import sglang": ["schedule", "import", "--from", "sglang", "{f}"],
    "schedule export": ["schedule", "export", "{f}", "--to", "vllm"],
    "table import trtllm": ["table", "import", "--from", "trtllm-iterations", "{f}", "--assume-power-w", "300",
                            "--box-class", "b", "--recipe", "r", "-o", "out.toml"],
    "table import sglang": ["table", "import", "--from", "sglang-log", "{f}", "--assume-power-w", "300",
                            "--box-class", "b", "--recipe", "r", "-o", "out.toml"],
    "calib import": ["calib", "import", "{f}", "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
                     "bf16", "--context", "true", "-o", "out.toml"],
    "calib drift --from-log": ["calib", "drift", "c.toml", "--from-log", "{f}"],
    "replay": ["replay", "{f}", "--trace", "a", "--policy", "fixed:1", "--width", "1", "--budget", "10"],
    "plan --confidences": ["plan", "t.toml", "c.toml", "--confidences", "{f}"],
    "tree TABLE": ["tree", "{f}", "ct.toml", "--n", "4"],
    "tree CALIBRATION": ["tree", "t.toml", "{f}", "--n", "4"],
    "tune --compare vllm:": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                             "--serial", "--quiet", "--compare", "vllm:{f}", "-o", "out.toml"],
    "table model --gpu-spec": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                               "eagle-1l", "--max-k", "2", "--widths", "1,2", "--gpu-spec", "{f}", "-o", "out.toml"],
    # this round's surfaces: draft trees, engine profiles, published comparisons
    "plan --tree CALIBRATION": ["plan", "t.toml", "{f}", "--n", "4", "--tree"],
    "calib fit --drafts-log (tree)": ["calib", "fit", "--drafts-log", "{f}", "--drafter-sha256", "ab" * 32,
                                      "--vocab", "9", "--quantization", "bf16", "--context", "true", "-o", "out.toml"],
    "calib import --tree FILE": ["calib", "import", "{f}", "--tree", "sglang:2,2,4", "--calibration", "ct.toml",
                                 "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16",
                                 "--context", "true"],
    "calib import --tree --calibration": ["calib", "import", "vllm.log", "--tree", "sglang:2,2,4", "--calibration",
                                          "{f}", "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
                                          "bf16", "--context", "true"],
    "table compare TABLE": ["table", "compare", "{f}", "--published", "pub.csv"],
    "table compare --published": ["table", "compare", "t.toml", "--published", "{f}"],
    "table model --model-config": ["table", "model", "--gpu", "h200", "--model-config", "{f}", "--drafter",
                                   "eagle-1l", "--max-k", "2", "--widths", "1,2", "-o", "out.toml"],
    "table model --engine --model-spec": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                                          "eagle-1l", "--max-k", "2", "--widths", "1,2", "--engine", "vllm",
                                          "--model-spec", "{f}", "-o", "out.toml"],
    "table model --drafter-spec": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                                   "eagle-1l", "--max-k", "2", "--widths", "1,2", "--drafter-spec", "{f}",
                                   "-o", "out.toml"],
    "table import --nvml-log": ["table", "import", "--from", "trtllm-iterations", "iters.jsonl", "--nvml-log", "{f}",
                                "--box-class", "b", "--recipe", "r", "-o", "out.toml"],
    # the studies' values and the shared trace line loop
    "trace show": ["trace", "show", "{f}"],
    "trace show --format csv": ["trace", "show", "{f}", "--format", "csv", "--columns",
                                "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens"],
    "tune --trace": ["tune", "--trace", "{f}", "--table", "t.toml", "--calibration", "c.toml", "--serial",
                     "--max-rounds", "0", "-o", "out.toml"],
    "tune --table": ["tune", "--trace", "tiny.csv", "--table", "{f}", "--calibration", "c.toml", "--serial",
                     "--max-rounds", "0", "-o", "out.toml"],
    "capacity --trace": ["capacity", "--trace", "{f}", "--table", "t.toml", "--calibration", "c.toml",
                         "--slo-tpot-s", "1", "--serial", "--policy", "fixed:1", "--json", "out.toml"],
    "capacity --calibration": ["capacity", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "{f}",
                               "--slo-tpot-s", "1", "--serial", "--policy", "fixed:1", "--json", "out.toml"],
    "capacity --fleet": ["capacity", "--trace", "tiny.csv", "--fleet", "{f}", "--slo-tpot-s", "1", "--threads", "2",
                         "--policy", "fixed:1", "--json", "out.toml"],
    "table model --engine sglang --model-config": ["table", "model", "--gpu", "h200", "--model-config", "{f}",
                                                   "--drafter", "eagle3-1l", "--max-k", "2", "--widths", "1,2",
                                                   "--engine", "sglang", "-o", "out.toml"],
    "table model --engine trtllm --drafter-spec": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b",
                                                   "--drafter", "eagle-1l", "--max-k", "2", "--widths", "1,2",
                                                   "--engine", "trtllm", "--drafter-spec", "{f}", "-o", "out.toml"],
}

# -- numeric and text options ---------------------------------------------------------------------

BAD_VALUES = ["-1", "1e308", "nan", "inf", "9" * 30, "x", "", "1.5e-308", "\x01", "0x10", "٣", "²", "1_0",
              str(2**63), "-0"]
OPTIONS = {
    "table query --context": ["table", "query", "ctx.toml", "4", "2", "--context", "{v}"],
    "table query n": ["table", "query", "ctx.toml", "{v}", "2"],
    "table model --contexts": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                               "eagle-1l", "--max-k", "2", "--widths", "1,2", "--contexts", "{v}", "-o", "out.toml"],
    "table model --engine trtllm --tp": ["table", "model", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--drafter",
                                  "eagle-1l", "--max-k", "2", "--widths", "1,2", "--engine", "trtllm", "--tp", "{v}",
                                  "-o", "out.toml"],
    "table model --context-tokens": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                                     "eagle-1l", "--max-k", "2", "--widths", "1,2", "--context-tokens", "{v}",
                                     "-o", "out.toml"],
    "table import --assume-power-w": ["table", "import", "--from", "trtllm-iterations", "iters.jsonl",
                                      "--assume-power-w", "{v}", "--box-class", "b", "--recipe", "r", "-o", "out.toml"],
    "table import --min-samples": ["table", "import", "--from", "trtllm-iterations", "iters.jsonl",
                                   "--assume-power-w", "300", "--min-samples", "{v}", "--box-class", "b",
                                   "--recipe", "r", "-o", "out.toml"],
    "simulate --kv-capacity-tokens": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration",
                                      "c.toml", "--policy", "fixed:1", "--kv-capacity-tokens", "{v}", "--quiet"],
    "simulate --kv-block-size": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                 "--policy", "fixed:1", "--kv-block-size", "{v}", "--quiet"],
    "simulate --prefill-ms-per-step": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration",
                                       "c.toml", "--policy", "fixed:1", "--prefill-ms-per-step", "{v}", "--quiet"],
    "simulate --max-num-batched-tokens": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration",
                                          "c.toml", "--policy", "fixed:1", "--max-num-batched-tokens", "{v}",
                                          "--quiet"],
    "simulate --idle-w": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                          "--policy", "fixed:1", "--idle-w", "{v}", "--quiet"],
    "simulate --rate-scale": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                              "--policy", "fixed:1", "--rate-scale", "{v}", "--quiet"],
    "simulate --slack": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                         "--policy", "load-aware", "--slack", "{v}", "--quiet"],
    "fleet --replicas": ["fleet", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                         "--replicas", "{v}", "--policy", "fixed:1"],
    "schedule export --max-batch": ["schedule", "export", "sched.toml", "--to", "trtllm", "--max-batch", "{v}"],
    "schedule export --widths-max": ["schedule", "export", "--planner", "t.toml", "c.toml", "--to", "vllm",
                                     "--widths-max", "{v}"],
    "schedule export --tree-width": ["schedule", "export", "--planner", "t.toml", "ct.toml", "--tree", "--to", "sglang",
                                     "--tree-width", "{v}"],
    "tune --seeds": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml", "--serial",
                     "--seeds", "{v}", "-o", "out.toml"],
    "tree --n": ["tree", "t.toml", "ct.toml", "--n", "{v}"],
    "tree --widths": ["tree", "t.toml", "ct.toml", "--widths", "{v}"],
    "tree --max-nodes": ["tree", "t.toml", "ct.toml", "--n", "4", "--max-nodes", "{v}"],
    "tree --max-depth": ["tree", "t.toml", "ct.toml", "--n", "4", "--max-depth", "{v}"],
    "tree --tree-attention-factor": ["tree", "t.toml", "ct.toml", "--n", "4", "--tree-attention-factor", "{v}"],
    "tree --context": ["tree", "t.toml", "ct.toml", "--n", "4", "--context", "{v}"],
    "plan --tree --max-nodes": ["plan", "t.toml", "ct.toml", "--n", "4", "--tree", "--max-nodes", "{v}"],
    "calib fit --rates": ["calib", "fit", "--rates", "{v}", "--drafter-sha256", "ab" * 32, "--vocab", "9",
                          "--quantization", "bf16", "--context", "true", "-o", "out.toml"],
    "calib fit --rank-rates": ["calib", "fit", "--rates", "0.8", "--rank-rates", "0.6,{v}", "--drafter-sha256",
                               "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true", "-o",
                               "out.toml"],
    "calib fit --tree-depths": ["calib", "fit", "--rank-rates", "0.6,0.1", "--tree-depths", "{v}",
                                "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context",
                                "true", "-o", "out.toml"],
    "plan --tree --max-depth": ["plan", "t.toml", "ct.toml", "--n", "4", "--tree", "--max-depth", "{v}"],
    "plan --tree --tree-attention-factor": ["plan", "t.toml", "ct.toml", "--n", "4", "--tree",
                                            "--tree-attention-factor", "{v}"],
    "plan --tree --n": ["plan", "t.toml", "ct.toml", "--tree", "--n", "{v}"],
    "plan --tree --context": ["plan", "ctx.toml", "ct.toml", "--n", "4", "--tree", "--context", "{v}"],
    "calib import --tree sglang:": ["calib", "import", "vllm.log", "--tree", "sglang:2,{v},4", "--calibration",
                                    "ct.toml", "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
                                    "bf16", "--context", "true"],
    "calib import --tree trtllm:": ["calib", "import", "vllm.log", "--tree", "trtllm:2,2,{v}", "--calibration",
                                    "ct.toml", "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
                                    "bf16", "--context", "true"],
    "calib import --tree vllm:": ["calib", "import", "vllm.log", "--tree", "vllm:[({v},)]", "--calibration",
                                  "ct.toml", "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
                                  "bf16", "--context", "true"],
    "table model --engine --tp": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                                  "eagle-1l", "--max-k", "2", "--widths", "1,2", "--engine", "vllm", "--tp", "{v}",
                                  "-o", "out.toml"],
    "table model --engine --max-k": ["table", "model", "--gpu", "mi300x", "--model", "deepseek-v3", "--drafter",
                                     "eagle-1l", "--max-k", "{v}", "--widths", "1,2", "--engine", "vllm", "--tp", "8",
                                     "-o", "out.toml"],
    "table compare --method": ["table", "compare", "t.toml", "--published", "pub.csv", "--method", "{v}"],
    "schedule export --method": ["schedule", "export", "sched.toml", "--to", "vllm", "--method", "{v}"],
    "calib fit --drafter-sha256": ["calib", "fit", "--rates", "0.8,0.6", "--drafter-sha256", "{v}", "--vocab", "9",
                                   "--quantization", "bf16", "--context", "true", "-o", "out.toml"],
    # the studies (tune, capacity) on each executor kind
    "tune --holdout": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml", "--serial",
                       "--max-rounds", "0", "--holdout", "{v}", "-o", "out.toml"],
    "tune --min-gain": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml", "--threads",
                        "--max-rounds", "0", "--min-gain", "{v}", "-o", "out.toml"],
    "tune --widths-max": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml", "--serial",
                          "--max-rounds", "0", "--widths-max", "{v}", "-o", "out.toml"],
    "tune --workers": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml", "--threads",
                       "--max-rounds", "0", "--workers", "{v}", "-o", "out.toml"],
    "capacity --max-replicas": ["capacity", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                "--slo-tpot-s", "1", "--attainment", "0.5", "--serial", "--policy", "fixed:1",
                                "--max-replicas", "{v}"],
    "capacity --gpu-hour-usd": ["capacity", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                "--slo-tpot-s", "1", "--attainment", "0.5", "--serial", "--policy", "fixed:1",
                                "--gpu-hour-usd", "{v}"],
    "capacity --threads": ["capacity", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                           "--slo-tpot-s", "1", "--attainment", "0.5", "--threads", "{v}", "--policy", "fixed:1"],
    "capacity --resample-windows": ["capacity", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                    "--slo-tpot-s", "1", "--attainment", "0.5", "--serial", "--policy", "fixed:1",
                                    "--resample-windows", "{v}"],
    "table model --engine sglang --context-tokens": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b",
                                                     "--drafter", "eagle3-1l", "--max-k", "2", "--widths", "1,2",
                                                     "--engine", "sglang", "--context-tokens", "{v}", "-o",
                                                     "out.toml"],
}
# Values a command may rightly accept: -0 is 0, and a tiny positive number is a valid cost,
# power, slack or scale wherever 0 is.
MAY_ACCEPT = {"-0", "1.5e-308"}
# Options that take text (a name): only an empty or unprintable value is impossible. A SHA-256 is
# 64 hex digits and nothing else.
TEXT_OPTIONS = {"schedule export --method", "calib fit --drafter-sha256", "table compare --method"}


def _must_refuse(opt: str, v: str) -> bool:
    if opt.endswith("sha256"):
        return len(v) != 64 or any(c not in "0123456789abcdefABCDEF" for c in v)
    if opt in TEXT_OPTIONS:
        return v == "" or not v.isprintable()
    return v not in MAY_ACCEPT

POLICIES = ["load-aware:3", "sglang[0]:s.json", "sglang[99999999999999]:s.json", "sglang[1,x]:s.json",
            "sglang[]:s.json", "sglang[1,2,4]:", "vllm:", "trtllm:   ", "fixed:99999", "fixed:-1", "fixed:²",
            "schedule:1-=2000", "schedule:0-4=1", "schedule:1-4=1,3-8=2", "schedule:" + "1-2=1," * 5000,
            "propose:1", "goodput:x", "LOAD-AWARE", "load_aware", "sequence\x00", "vllm:v.json:extra",
            "schedule:1-" + "9" * 40 + "=1", "propose@1e308", "propose@nan", "propose@inf", "propose@-1",
            "sequence@1e-400", "load-aware@0.1:3", "propose@0.1@0.2", "propose@", "@0.1", "propose@" + "9" * 5000,
            "propose@\u0663", "goodput@0.1", "fixed:2@0.1", "sequence@0x1", "propose @0.1"]

# Policies a run may rightly accept: a name in capitals, spaces around a part (both read as the
# plain form and labelled so), and a slack that underflows to 0 (slack 0, labelled so).
MAY_ACCEPT_POLICIES = {"LOAD-AWARE", "sequence@1e-400", "propose @0.1"}

OUTPUT_EQUALS_INPUT = {
    "simulate --json = --table": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                  "--policy", "fixed:1", "--json", "{o}"],
    "simulate --json = --prefill-curve": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration",
                                          "c.toml", "--policy", "fixed:1", "--prefill-curve", "curve.csv",
                                          "--json", "{o}"],
    "simulate --json = sglang[..]:": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration",
                                      "c.toml", "--policy", "sglang[1,4]:s.json", "--json", "{o}"],
    "simulate --requests-csv = trtllm:": ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration",
                                          "c.toml", "--policy", "trtllm:tr.yaml", "--requests-csv", "{o}"],
    "fleet --json = --fleet": ["fleet", "--trace", "tiny.csv", "--fleet", "fleet.toml", "--policy", "fixed:1",
                               "--json", "{o}"],
    "table import -o = FILE": ["table", "import", "--from", "trtllm-iterations", "iters.jsonl", "--assume-power-w",
                               "300", "--box-class", "b", "--recipe", "r", "-o", "{o}"],
    "schedule export -o = SCHEDULE": ["schedule", "export", "sched.toml", "--to", "vllm", "-o", "{o}"],
    "tune -o = --compare": ["tune", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                            "--serial", "--compare", "vllm:v.json", "-o", "{o}"],
    "calib import -o = FILE": ["calib", "import", "vllm.log", "--drafter-sha256", "ab" * 32, "--vocab", "9",
                               "--quantization", "bf16", "--context", "true", "-o", "{o}"],
    "capacity --json = sglang": ["capacity", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml",
                                 "--slo-tpot-s", "1", "--serial", "--policy", "sglang:s.json", "--json", "{o}"],
    "tree --json = CALIBRATION": ["tree", "t.toml", "ct.toml", "--n", "4", "--json", "{o}"],
    "tree --json = TABLE": ["tree", "t.toml", "ct.toml", "--n", "4", "--json", "{o}"],
    "calib fit -o = --drafts-log": ["calib", "fit", "--drafts-log", "tlog.csv", "--drafter-sha256", "ab" * 32,
                                    "--vocab", "9", "--quantization", "bf16", "--context", "true", "-o", "{o}"],
    "table compare --plot = TABLE": ["table", "compare", "t.toml", "--published", "pub.csv", "--plot", "{o}"],
    "table model -o = --model-config": ["table", "model", "--gpu", "h200", "--model-config", "hf.json", "--drafter",
                                        "eagle-1l", "--max-k", "2", "--widths", "1,2", "-o", "{o}"],
    "replay --json = FILE": ["replay", "acc.toml", "--trace", "a", "--policy", "fixed:1", "--width", "1",
                             "--budget", "10", "--json", "{o}"],
}
TARGET_OF = {"simulate --json = --table": "t.toml", "simulate --json = --prefill-curve": "curve.csv",
             "simulate --json = sglang[..]:": "s.json", "simulate --requests-csv = trtllm:": "tr.yaml",
             "fleet --json = --fleet": "fleet.toml", "table import -o = FILE": "iters.jsonl",
             "schedule export -o = SCHEDULE": "sched.toml", "tune -o = --compare": "v.json",
             "calib import -o = FILE": "vllm.log", "capacity --json = sglang": "s.json",
             "replay --json = FILE": "acc.toml", "tree --json = CALIBRATION": "ct.toml",
             "tree --json = TABLE": "t.toml", "calib fit -o = --drafts-log": "tlog.csv",
             "table compare --plot = TABLE": "t.toml", "table model -o = --model-config": "hf.json"}


def cases():
    """Every case: ``(name, argv template, how to prepare the folder, must_refuse)``."""
    out = []
    for slot, argv in SLOTS.items():
        for kind, data in CONTENTS.items():
            out.append((f"file {slot} <- {kind}", argv, ("bytes", data), True))
        for kind in SPECIAL:
            out.append((f"file {slot} <- {kind}", argv, (kind, None), True))
    for opt, argv in OPTIONS.items():
        for v in BAD_VALUES:
            out.append((f"option {opt} = {v[:20]!r}", [a.replace("{v}", v) for a in argv], ("none", None),
                        _must_refuse(opt, v)))
    for slot, what, data in format_contents():
        out.append((f"format {slot}: {what}", FORMAT_SLOTS[slot], ("bytes", data), True))
    for pol in POLICIES:
        argv = ["simulate", "--trace", "tiny.csv", "--table", "t.toml", "--calibration", "c.toml", "--policy", pol,
                "--quiet"]
        out.append((f"policy {pol[:40]!r}", argv, ("none", None), pol not in MAY_ACCEPT_POLICIES))
    for name, argv in OUTPUT_EQUALS_INPUT.items():
        target = TARGET_OF[name]
        out.append((f"output {name}", [a.replace("{o}", target) for a in argv], ("none", None), True))
        out.append((f"output {name} (symlink)", [a.replace("{o}", "link.out") for a in argv], ("link", target), True))
    return out


# -- this round's formats, each with contents that are wrong in its own terms -------------------

KEY_ARGS = ["--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true"]
FORMAT_SLOTS = {
    "published": ["table", "compare", "t.toml", "--published", "{f}"],
    "config.json": ["table", "model", "--gpu", "h200", "--model-config", "{f}", "--drafter", "eagle-1l", "--max-k",
                    "2", "--widths", "1,2", "-o", "out.toml"],
    "tree drafts log": ["calib", "fit", "--drafts-log", "{f}", *KEY_ARGS, "-o", "out.toml"],
    "[tree] table": ["tree", "t.toml", "{f}", "--n", "4"],
    "[[gpu]] spec": ["table", "model", "--gpu", "x", "--gpu-spec", "{f}", "--model", "llama-3.1-8b", "--drafter",
                     "eagle-1l", "--max-k", "2", "--widths", "1,2", "--tp", "2", "--engine", "vllm", "-o", "out.toml"],
}
# A GPU the engines' all-reduce runs on (NVSwitch): the cases change one field of it.
GPU_FIELDS = {"name": '"x"', "memory_gb": "80", "bandwidth_gbs": "3350", "bf16_tflops": "989", "tdp_w": "700",
            "idle_w": "70", "link_gbs": "450", "arch": '"hopper"', "interconnect": '"nvswitch"'}


def format_contents() -> list:
    """``(slot, what, bytes)``: one wrong thing each (a value out of its range or of the wrong
    type, a row the format cannot hold), every other part of the file right."""
    from specsim.demo_inputs import demo_calibration

    out = []
    row = "R9,vLLM,H200,1,m,EAGLE,{k},chain,{b},TPOT,{v},ms,6,{al},x\n"
    head = PUBLISHED.splitlines(keepends=True)[0]
    for what, k, b, v, al in [("value nan", 3, 1, "nan", 2.5), ("value inf", 3, 1, "inf", 2.5),
                              ("value 4_0", 3, 1, "4_0", 2.5), ("value in other digits", 3, 1, "\u0663", 2.5),
                              ("value 1e308", 3, 1, "1e308", 2.5), ("acceptance length 0.5", 3, 1, 4, 0.5),
                              ("acceptance length past k + 1", 3, 1, 4, 5), ("acceptance length -2", 3, 1, 4, -2),
                              ("depth 0", 0, 1, 4, 1.5), ("batch past the widths", 3, 10**8, 4, 2.5),
                              ("depth past the table", 99, 1, 4, 2.5)]:
        out.append(("published", what, (head + row.format(k=k, b=b, v=v, al=al)).encode()))
    fields = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "vocab_size")
    for field in fields:
        for bad in (0, -1, 10**400, 1.5, True, "4096", [8], float("nan")):
            doc = dict(HF_CONFIG, **{field: bad})
            out.append(("config.json", f"{field} = {bad!r:.12}", json.dumps(doc).encode()))
    for what, extra in [("heads not dividing hidden", {"num_attention_heads": 7, "num_key_value_heads": 7}),
                        ("kv heads not dividing heads", {"num_key_value_heads": 3}),
                        ("model_type a list", {"model_type": ["llama"]}), ("torch_dtype int8", {"torch_dtype": "int8"}),
                        ("latent attention", {"kv_lora_rank": 512, "q_lora_rank": 1536}),
                        ("experts", {"num_local_experts": 8, "num_experts_per_tok": 2})]:
        out.append(("config.json", what, json.dumps(dict(HF_CONFIG, **extra)).encode()))
    out.append(("config.json", "a key given twice", (json.dumps(HF_CONFIG)[:-1] + ', "hidden_size": 8192}').encode()))
    for col, values in (("rank", ["0", "17", "1.5", "nan", "x", "", "\u0663", "9" * 25]),
                        ("parent", ["-2", "5", "2", "1.5", "x", "\u0663", "9" * 25])):
        for v in values:
            r = {"rank": "1", "parent": "0"} | {col: v}
            out.append(("tree drafts log", f"{col} = {v[:12]!r}",
                        (TREE_LOG + f"999,0,2,-0.2,1,{r['rank']},{r['parent']}\n").encode()))
    for what, rows in [("a rank twice under one parent", "999,0,1,-0.1,1,1,-1\n999,0,1,-0.2,0,1,-1\n"),
                       ("two accepted siblings", "999,0,1,-0.1,1,1,-1\n999,0,1,-0.2,1,2,-1\n"),
                       ("a position off its parent's depth", "999,0,1,-0.1,1,1,-1\n999,0,3,-0.2,1,1,0\n"),
                       ("its own parent", "999,0,1,-0.1,1,1,0\n"),
                       ("65 deep", "".join(f"999,0,{d},-0.1,1,1,{d - 2}\n" for d in range(1, 66)))]:
        out.append(("tree drafts log", what, (TREE_LOG + rows).encode()))
    base = demo_calibration().render() + "\n[tree]\n"
    for body in ["rank_acceptance = [[true]]", "rank_acceptance = [[nan]]", "rank_acceptance = [[1e400]]",
                 "rank_acceptance = [[0.5, 0.6]]", 'rank_acceptance = [["0.5"]]', "rank_acceptance = [[]]",
                 "rank_acceptance = [[0.5], [0.5, 0.1]]", "rank_acceptance = [[[0.5]]]",
                 "rank_acceptance = [" + ",".join(["[0.5]"] * 65) + "]",
                 "rank_acceptance = [[" + ",".join(["0.01"] * 17) + "]]",
                 'rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[6]]\nsource = "x"',
                 'rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[5.0]]\nsource = "x"',
                 'rank_acceptance = [[0.5]]\nreached = [0]\nmatched = [[0]]\nsource = "x"',
                 "rank_acceptance = [[0.5]]\nreached = [10]", "rank_acceptance = [[0.5]]\nrank_acceptance = [[0.4]]"]:
        out.append(("[tree] table", body.replace("\n", "; ")[:50], (base + body + "\n").encode()))
    for field, values in (("interconnect", ['"NVSwitch"', '""', '"nvswitch "', "1", "true", '["nvswitch"]']),
                          ("link_gbs", ["0", "1e-300", "1e308", "nan", "inf", "-5", '"450"'])):
        for v in values:
            doc = GPU_FIELDS | {field: v}
            out.append(("[[gpu]] spec", f"{field} = {v}",
                        ("[[gpu]]\n" + "".join(f"{k} = {x}\n" for k, x in doc.items())).encode()))
    return out


# -- running one case -----------------------------------------------------------------------------

def _snapshot(d: Path) -> dict:
    out = {}
    for p in d.rglob("*"):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _prepare(d: Path, how) -> str:
    kind, data = how
    f = d / "in.dat"
    if kind == "bytes":
        f.write_bytes(data)
    elif kind == "fifo":
        os.mkfifo(f)
    elif kind == "/dev/zero":
        return "/dev/zero"
    elif kind == "folder":
        f.mkdir()
    elif kind == "missing":
        pass
    elif kind == "symlink loop":
        os.symlink("in.dat", f)
    elif kind == "link":
        os.symlink(data, d / "link.out")
    return "in.dat"


def run_case(template: Path, name, argv, how, must_refuse):
    import shutil

    from specsim.cli import main

    with tempfile.TemporaryDirectory(prefix="hostile.") as tmp:
        d = Path(tmp)
        for p in template.iterdir():
            shutil.copy(p, d / p.name)
        f = _prepare(d, how)
        argv = [a.replace("{f}", f) for a in argv]
        before = _snapshot(d)
        inputs = {k for k in before if k != "out.toml"}
        old_cwd = os.getcwd()
        err, outbuf = io.StringIO(), io.StringIO()

        def fire(*_):
            raise Watchdog()

        old = signal.signal(signal.SIGALRM, fire)
        signal.alarm(WATCHDOG_S)
        start = time.monotonic()
        verdict, detail = "ok", ""
        try:
            os.chdir(d)
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(outbuf):
                try:
                    code = main(argv)
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else 2
        except Watchdog:
            verdict, code = "hang", None
        except BaseException as e:  # noqa: BLE001 - what escapes is the finding
            verdict, code, detail = "crash", None, f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            os.chdir(old_cwd)
        seconds = time.monotonic() - start
        text = err.getvalue()
        if verdict == "ok":
            if "Traceback" in text or code not in (0, 2, 130):
                verdict, detail = "crash", f"exit {code}: {text[-300:]}"
            else:
                after = _snapshot(d)
                changed = [k for k in before if after.get(k) != before[k]]
                damaged = [k for k in changed if k in inputs or code != 0]
                if damaged:
                    verdict, detail = "damaged", f"changed: {', '.join(damaged)}"
                elif must_refuse and code == 0:
                    verdict, detail = "wrong", "accepted impossible input (exit 0)"
        if verdict == "ok" and code == 2 and "specsim: error" not in text and "error:" not in text:
            verdict, detail = "crash", f"exit 2 without a message: {text[-200:]}"
        return {"case": name, "class": verdict, "exit": code, "seconds": round(seconds, 2), "detail": detail,
                "stderr": text[-400:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="run only cases whose name holds this text")
    ap.add_argument("--json", help="write every outcome to this file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hostile-base.") as base:
        template = Path(base)
        base_files(template)
        root = ROOT
        import shutil

        shutil.copy(root / "examples" / "vllm.log", template / "vllm.log")
        from specsim.cli import main as cli

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cwd = os.getcwd()
            os.chdir(template)
            try:
                cli(["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l",
                     "--max-k", "3", "--widths", "1,4,16", "--contexts", "512,4096", "-o", "ctx.toml"])
            finally:
                os.chdir(cwd)
        chosen = [c for c in cases() if args.k in c[0]]
        results = []
        for i, (name, tmpl, how, must_refuse) in enumerate(chosen, 1):
            r = run_case(template, name, tmpl, how, must_refuse)
            results.append(r)
            if r["class"] != "ok":
                print(f"[{i}/{len(chosen)}] {r['class']:8s} {name}: {r['detail'][:160]}", file=sys.stderr)
    counts = {}
    for r in results:
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    print(json.dumps({"cases": len(results), "counts": counts}))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
