"""The analytic cost model: roofline sanity, specs, tables, CLI, and validation against measurements."""

import csv
import dataclasses
import itertools
import sys
from collections import defaultdict

import numpy as np
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from specsim.cli import main
from specsim.costmodel import (BUILTIN_DRAFTERS, BUILTIN_GPUS, BUILTIN_MODELS, Achieved,
                               Overheads, achieved_for, gpu_spec, model_spec, model_table,
                               parse_specs, plain_decode_ms, plain_decode_power_w, Setup, step_costs)
from specsim.errors import CostModelError, SpecsimError
from specsim.table import CostTable

SMALL = dict(widths=[1, 2, 4, 8, 16, 32, 64], max_k=4, context_tokens=512)


def _table(gpu="h200", model="llama-3.1-8b", drafter="eagle-1l", **kw):
    args = dict(SMALL)
    args.update(kw)
    return model_table(gpu, model, drafter, **args)


# -- roofline sanity ----------------------------------------------------------------------------
@pytest.mark.parametrize("gpu,model,drafter,tp", [
    ("h200", "llama-3.1-8b", "eagle-1l", 1),
    ("h100-sxm", "llama-3.1-70b", "eagle3-1l", 4),
    ("a100-80gb", "llama-2-70b", "eagle-1l", 2),
    ("b200", "qwen3-30b-a3b", "mtp-1l", 1),
    ("l40s", "llama-3.1-8b", "eagle-1l", 1),
    ("gb10", "qwen3-32b", "mtp-1l", 1),
])
def test_costs_are_monotone_and_draft_is_zero_at_depth_zero(gpu, model, drafter, tp):
    t = _table(gpu, model, drafter, tp=tp)
    c = t.costs
    assert np.isfinite(c).all()
    assert (c[:, :, 0] > 0).all() and (c[:, :, 1] > 0).all()
    # More rows never cost less: along widths at every depth, and along depths at every width.
    assert (np.diff(c[:, :, 0], axis=0) >= 0).all()
    assert (np.diff(c[:, :, 0], axis=1) >= 0).all()
    assert (np.diff(c[:, :, 1], axis=0) >= 0).all()
    assert (np.diff(c[:, :, 2], axis=0) >= 0).all()
    # k = 0 is a plain decode step: no draft cost at all, exactly.
    assert (c[:, 0, 2] == 0.0).all() and (c[:, 0, 3] == 0.0).all()
    assert (c[:, 1:, 2] > 0).all() and (c[:, 1:, 3] > 0).all()
    # k chained drafter steps over n rows cost k times one step.
    np.testing.assert_allclose(c[:, 3, 2], 3 * c[:, 1, 2], rtol=1e-12)


def test_small_widths_are_memory_bound_and_large_ones_grow():
    # One row or eight reads the same weights: on an H200 the 8B model stays memory-bound there.
    g, m, d = gpu_spec("h200"), model_spec("llama-3.1-8b"), BUILTIN_DRAFTERS["eagle-1l"]
    ov = Overheads(seq_ms=0.0)
    c = step_costs(Setup(g, m, d, context_tokens=0, overheads=ov), widths=[1], max_k=7)
    np.testing.assert_allclose(c[0, :, 0], c[0, 0, 0], rtol=0.02)
    # The bf16 weights of Llama-3.1-8B over the achieved bandwidth, plus 11 kernels' floors per
    # layer (9 operators and attention) and 3 for the head, plus the fixed overhead.
    ach = achieved_for(g)
    weights_ms = 2 * (m.params_active) / (4800e9 * ach.memory_efficiency) * 1e3
    floors_ms = (10 * m.layers + 3) * ach.op_floor_us * 1e-3
    assert c[0, 0, 0] == pytest.approx(weights_ms + floors_ms + ov.step_ms, rel=0.01)
    # Thousands of rows are compute-bound: cost then grows with rows.
    big = step_costs(Setup(g, m, d, context_tokens=0, overheads=ov), widths=[512, 1024], max_k=1)
    assert big[1, 0, 0] > big[0, 0, 0] > c[0, 0, 0]


def test_moe_reads_more_experts_as_rows_grow():
    g, m = gpu_spec("h200"), model_spec("qwen3-30b-a3b")
    assert m.params_active < 0.15 * m.params_total
    ov = Overheads(seq_ms=0.0, step_ms=0.0)
    ms = plain_decode_ms(g, m, batch=np.array([1, 8, 64, 512]), context_tokens=0, overheads=ov)
    assert (np.diff(ms) > 0).all()
    all_weights_ms = 2 * (m.params_total - m.head_params) / (4800e9 * achieved_for(g).memory_efficiency) * 1e3
    # One row reads its 8 experts of 128 (plus ~630 kernel floors); 64 rows touch almost all.
    assert ms[0] < 0.3 * all_weights_ms and 0.9 * all_weights_ms <= ms[2] <= all_weights_ms * 1.25


def test_tensor_parallel_splits_weights_and_adds_communication():
    one = plain_decode_ms("h100-sxm", "llama-3.1-8b", tp=1, batch=1, context_tokens=0)
    two = plain_decode_ms("h100-sxm", "llama-3.1-8b", tp=2, batch=1, context_tokens=0)
    ov = Overheads()
    assert two < one
    assert two > ov.step_ms + ov.seq_ms + (one - ov.step_ms - ov.seq_ms) / 2


def test_energy_is_between_idle_and_tdp_power():
    t = _table("h100-sxm", "llama-3.1-70b", "eagle-1l", tp=4)
    power_w = t.costs[:, :, 1] / (t.costs[:, :, 0] * 1e-3) / 4
    g = BUILTIN_GPUS["h100-sxm"]
    assert (power_w > g.idle_w).all() and (power_w < g.tdp_w).all()


# -- tables -------------------------------------------------------------------------------------
def test_every_builtin_combination_makes_a_valid_round_tripping_table():
    made = 0
    for g, m, d in itertools.product(BUILTIN_GPUS, BUILTIN_MODELS, BUILTIN_DRAFTERS):
        try:
            t = model_table(g, m, d, tp=8 if m == "bloom-176b" else 2 if "70b" in m else 1,
                            widths=[1, 4, 16], max_k=3, context_tokens=256)
        except CostModelError as e:
            # Too big for the box, or a separate draft model whose vocabulary is not the target's.
            assert "hold" in str(e) or "overflow" in str(e) or "drafts in its target's vocabulary" in str(e)
            continue
        made += 1
        back = CostTable.parse(t.to_text(), "<round trip>")
        assert back == t and back.meta == t.meta
        assert back.meta["energy_source"] == "model" and back.meta["cost_source"] == "model"
        assert back.meta["gpu"] == g and back.meta["model"] == m and back.meta["drafter"] == d
        for mode in ("verify", "draft"):
            assert back.key.plan_digests[mode].startswith("model:sha256:")
    assert made >= 80


def test_key_names_box_recipe_and_digests_of_the_values_used():
    t = _table("h100-sxm", "llama-3.1-70b", "eagle-1l", tp=4)
    assert t.key.box_class == "h100-sxm-tp4"
    assert t.key.recipe == "llama-3.1-70b/eagle-1l-bf16"
    same = _table("h100-sxm", "llama-3.1-70b", "eagle-1l", tp=4)
    assert same.key == t.key
    other_drafter = _table("h100-sxm", "llama-3.1-70b", "eagle3-1l", tp=4)
    assert other_drafter.key.plan_digests["verify"] == t.key.plan_digests["verify"]
    assert other_drafter.key.plan_digests["draft"] != t.key.plan_digests["draft"]
    fp8 = _table("h100-sxm", model_spec("llama-3.1-70b", dtype="fp8"), "eagle-1l", tp=4)
    assert fp8.key.recipe == "llama-3.1-70b/eagle-1l-fp8"
    assert fp8.key.plan_digests["verify"] != t.key.plan_digests["verify"]
    assert (fp8.costs[:, 0, 0] < t.costs[:, 0, 0]).all()
    ctx = _table("h100-sxm", "llama-3.1-70b", "eagle-1l", tp=4, context_tokens=4096)
    assert ctx.key.plan_digests["verify"] != t.key.plan_digests["verify"]


def test_bad_names_list_the_known_ones():
    with pytest.raises(CostModelError) as e:
        model_table("h300", "llama-3.1-8b", "eagle-1l", max_k=2)
    for name in BUILTIN_GPUS:
        assert name in str(e.value)
    with pytest.raises(CostModelError, match="known models are .*llama-3.1-8b"):
        model_table("h200", "llama-9", "eagle-1l", max_k=2)
    with pytest.raises(CostModelError, match="known drafters are .*eagle-1l.*mtp-1l"):
        model_table("h200", "llama-3.1-8b", "medusa", max_k=2)


def test_bad_arguments_and_configs_that_do_not_fit_are_refused():
    with pytest.raises(CostModelError, match="use --tp 2"):
        model_table("h100-sxm", "llama-3.1-70b", "eagle-1l", max_k=2, widths=[1])
    with pytest.raises(CostModelError, match="at most .* sequences fit"):
        model_table("l40s", "llama-3.1-8b", "eagle-1l", max_k=2, widths=[1, 4096], context_tokens=8192)
    with pytest.raises(CostModelError) as e:
        model_table("h200", "llama-3.1-8b", "eagle-1l", max_k=-1, widths=[0, 2, 2], tp=3)
    text = str(e.value)
    assert "max_k" in text and ">= 1" in text and "repeat" in text and "does not divide" in text
    with pytest.raises(CostModelError, match="dtype"):
        model_spec("llama-3.1-8b", dtype="fp3")


# -- user specs ---------------------------------------------------------------------------------
USER_SPECS = """
[[gpu]]
name = "future-gpu"
memory_gb = 192
bandwidth_gbs = 6000
bf16_tflops = 1500
fp8_tflops = 3000
tdp_w = 900
idle_w = 90
link_gbs = 900
source = "a made-up datasheet"

[[model]]
name = "tiny-moe"
layers = 24
hidden = 2048
heads = 16
kv_heads = 4
head_dim = 128
intermediate = 4096
vocab = 50000
experts = 64
experts_per_token = 4
expert_intermediate = 1024
shared_intermediate = 2048
dtype = "fp8"

[[drafter]]
name = "two-layer"
layers = 2
fuse_inputs = 0
"""


def test_user_specs_from_toml_make_a_table():
    specs = parse_specs(USER_SPECS, "user.toml")
    assert set(specs["gpu"]) == {"future-gpu"} and set(specs["drafter"]) == {"two-layer"}
    t = model_table("future-gpu", "tiny-moe", "two-layer", specs=specs, **SMALL)
    assert t.key.box_class == "future-gpu" and t.key.recipe == "tiny-moe/two-layer-fp8"
    assert t.meta["gpu_source"] == "a made-up datasheet" and t.meta["model_source"] == "user spec"
    # A built-in drafter works with a user model, and spec objects work without names.
    t2 = model_table(specs["gpu"]["future-gpu"], specs["model"]["tiny-moe"], "mtp-1l", **SMALL)
    assert (t2.costs[:, 1:, 2] > 0).all()


def test_user_spec_files_that_are_wrong_list_every_problem():
    bad = """
[[gpu]]
name = "g"
memory_gb = 80
bandwidth_gbs = -1
bf16_tflops = "fast"
tdp_w = 100
idle_w = 200
speed = 3

[[model]]
name = "m"
layers = 2

[[drafter]]
name = "d"
layers = 0

[[accelerator]]
name = "x"
"""
    with pytest.raises(CostModelError) as e:
        parse_specs(bad, "bad.toml")
    text = str(e.value)
    assert text.startswith("bad.toml: the spec file is refused")
    for want in ("accelerator", "bf16_tflops = 'fast' is not a float", "unknown field 'speed'",
                 "[[model]] #1: missing required field(s) hidden", "[[drafter]] #1 ('d'): layers = 0"):
        assert want in text, want
    with pytest.raises(CostModelError, match="not valid TOML"):
        parse_specs("[[gpu]\n", "broken.toml")
    with pytest.raises(CostModelError, match="idle_w = 200.0 must be below tdp_w"):
        parse_specs('[[gpu]]\nname="g"\nmemory_gb=1\nbandwidth_gbs=1\nbf16_tflops=1\ntdp_w=100\nidle_w=200\n')


# -- CLI ----------------------------------------------------------------------------------------
def test_cli_writes_a_table_and_exits_zero(tmp_path, capsys):
    out = tmp_path / "t.toml"
    rc = main(["table", "model", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--drafter", "eagle-1l",
               "--tp", "4", "--context-tokens", "1024", "--widths", "1,2,4,8", "--max-k", "3", "-o", str(out)])
    assert rc == 0
    t = CostTable.load(out)
    assert t.widths.tolist() == [1, 2, 4, 8] and t.max_k == 3 and t.meta["energy_source"] == "model"
    assert "not a measurement" in capsys.readouterr().out
    assert main(["table", "check", str(out)]) == 0


def test_cli_reads_user_spec_files(tmp_path):
    spec = tmp_path / "specs.toml"
    spec.write_text(USER_SPECS)
    out = tmp_path / "t.toml"
    rc = main(["table", "model", "--gpu", "future-gpu", "--model", "tiny-moe", "--drafter", "two-layer",
               "--gpu-spec", str(spec), "--widths", "1,8", "--max-k", "2", "-o", str(out)])
    assert rc == 0 and CostTable.load(out).key.box_class == "future-gpu"


def test_cli_refusals_exit_two_without_writing(tmp_path, capsys):
    out = tmp_path / "t.toml"
    base = ["table", "model", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k", "2", "-o", str(out)]
    assert main(base + ["--gpu", "h300"]) == 2
    assert "known gpus are" in capsys.readouterr().err
    assert main(base + ["--gpu", "h200", "--gpu-spec", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read the spec file" in capsys.readouterr().err
    assert main(["table", "model", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--drafter", "eagle-1l",
                 "--max-k", "2", "-o", str(out)]) == 2
    assert "--tp 2" in capsys.readouterr().err
    assert not out.exists()
    # --max-k is required unless --list: refused by the command, in the same one line.
    assert main(["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "-o",
                 str(out)]) == 2
    assert "give --max-k (or --list to see the built-in specs)" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("tp", ["-1", "0", "-99999999999999999999999999999999999", "99999999999999999999999999999999999"])
def test_cli_refuses_a_tp_below_1_or_too_large_with_the_range_it_takes(tmp_path, capsys, tp):
    # -1 was refused as outside 0.., then 0 as outside 1..: one range, whichever the user tried.
    out = tmp_path / "t.toml"
    with pytest.raises(SystemExit) as ended:
        main(["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k",
              "2", f"--tp={tp}", "-o", str(out)])
    assert ended.value.code == 2 and not out.exists()
    assert f"argument --tp: '{tp}' is outside 1..4,611,686,018,427,387,904" in capsys.readouterr().err


# -- validation against measurements ------------------------------------------------------------
# Splitwise profiles: decode token time of llama2-70b (calibration set of the eager engine's host
# overheads) and bloom-176b (held out) on A100-80GB and H100 at tensor parallel 2-8, batch 1-64,
# vLLM-era eager serving. Each configuration's repeats are reduced to their median. The context a
# decode step sees is the prompt plus half the generated tokens (the mean over the generation).
SPLITWISE_GPU = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}
SPLITWISE_MODEL = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}


def _splitwise(shared_data):
    path = shared_data / "splitwise" / "perf_model.csv"
    groups = defaultdict(list)
    power = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["hardware"] not in SPLITWISE_GPU:  # h100-80gb-pcap repeats h100-80gb's times
                continue
            key = (r["model"], r["hardware"], int(r["tensor_parallel"]), int(r["batch_size"]),
                   int(r["prompt_size"]), int(r["token_size"]))
            groups[key].append(float(r["token_time"]))
            if r["hardware"] == "a100-80gb" and float(r["average_power"]) > 0:
                power.append((key, float(r["average_power"])))
    return {k: float(np.median(v)) for k, v in groups.items()}, power


def _splitwise_errors(points, model):
    keys = [k for k in points if k[0] == model]
    measured = np.array([points[k] for k in keys])
    modelled = np.array([
        float(plain_decode_ms(SPLITWISE_GPU[hw], SPLITWISE_MODEL[m], tp=tp, batch=b, context_tokens=p + t / 2,
                              overheads="eager"))
        for m, hw, tp, b, p, t in keys
    ])
    return np.abs(modelled - measured) / measured


def test_plain_decode_time_matches_splitwise_llama2_70b(shared_data):
    points, _ = _splitwise(shared_data)
    err = _splitwise_errors(points, "llama2-70b")
    assert err.size >= 100
    print(f"splitwise llama2-70b (calibration set): n={err.size} mean {err.mean():.3f} worst {err.max():.3f}")
    # Measured here: mean 0.091, worst 0.374.
    assert err.mean() <= 0.10
    assert err.max() <= 0.40


def test_plain_decode_time_matches_splitwise_bloom_held_out(shared_data):
    points, _ = _splitwise(shared_data)
    err = _splitwise_errors(points, "bloom-176b")
    assert err.size >= 30
    print(f"splitwise bloom-176b (held out): n={err.size} mean {err.mean():.3f} worst {err.max():.3f}")
    # Measured here: mean 0.042, worst 0.131.
    assert err.mean() <= 0.10
    assert err.max() <= 0.20


def test_decode_power_matches_splitwise_a100_average_power(shared_data):
    _, power = _splitwise(shared_data)
    a100 = BUILTIN_GPUS["a100-80gb"]
    measured = np.array([p for _, p in power])
    modelled = np.array([
        float(plain_decode_power_w("a100-80gb", SPLITWISE_MODEL[m], tp=tp, batch=b, context_tokens=p + t / 2,
                                   overheads="eager"))
        for (m, _, tp, b, p, t), _ in power
    ]) / a100.tdp_w  # Splitwise normalises power by the 400 W TDP
    err = np.abs(modelled - measured) / measured
    bias = float(np.mean((modelled - measured) / measured))
    print(f"splitwise A100 mean power: n={err.size} mean {err.mean():.3f} median {np.median(err):.3f} "
          f"worst {err.max():.3f} bias {bias:+.3f}")
    # Measured here: mean 0.228, median 0.133, bias +0.002; the worst are 8k-token prompts whose
    # profiled average power (0.17) falls far below every other run.
    assert err.mean() <= 0.30 and np.median(err) <= 0.20 and abs(bias) <= 0.10


# GB10: Qwen3.8-27B NVFP4 + MTP on one GB10 (two runs, n = 1-8, k = 0-3). The exact config is not
# public: the model below is a 27.9B dense model in Qwen3-32B's shape (54 of its layers) with
# NVFP4 weights and a bf16 LM head, as NVFP4 checkpoints keep it. Context: 1,024 tokens.
GB10_MODEL = """
[[model]]
name = "qwen-27b-class"
layers = 54
hidden = 5120
heads = 64
kv_heads = 8
head_dim = 128
intermediate = 25600
vocab = 151936
dtype = "nvfp4"
head_dtype = "bf16"
"""


def _gb10_errors(shared_data):
    doc = tomllib.loads((shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml").read_text())
    specs = parse_specs(GB10_MODEL, "<gb10 model>")
    t = model_table("gb10", "qwen-27b-class", "mtp-1l", specs=specs, widths=[1, 2, 4, 8], max_k=3,
                    context_tokens=1024)
    errs = {f: [] for f in ("verify_ms", "verify_j", "draft_ms", "draft_j")}
    for run in doc["run"]:
        for n, k, *measured in run["cells"]:
            cell = t.cell(n, k)
            for f, m in zip(errs, measured):
                if k == 0 and f.startswith("draft"):
                    assert getattr(cell, f) == 0.0 == m
                    continue
                errs[f].append(abs(getattr(cell, f) - m) / m)
    return {f: np.array(v) for f, v in errs.items()}


def test_verify_time_matches_the_gb10_table(shared_data):
    errs = _gb10_errors(shared_data)
    for f, e in errs.items():
        print(f"GB10 {f}: n={e.size} mean {e.mean():.3f} worst {e.max():.3f}")
    # Measured here: verify_ms mean 0.196, worst 0.455 (GB10's class has no profile: it takes the
    # mean of the fitted classes; the table's step from 8 to 12+ rows is a kernel effect a
    # roofline does not have).
    assert errs["verify_ms"].mean() <= 0.22
    assert errs["verify_ms"].max() <= 0.50


def test_gb10_draft_time_and_energy_errors_are_as_reported(shared_data):
    # Not a target the model meets: these bounds pin the reported errors, so a change to the
    # model that moves them is seen. Measured here: draft_ms mean 0.52 (the model reads a bf16
    # LM head per MTP step, where the serve takes ~5.5 ms); verify_j mean 0.73 and draft_j mean
    # 2.29 (GB10's 140 W is the whole SoC's TDP, while the measured GPU energy implies ~55 W).
    errs = _gb10_errors(shared_data)
    assert 0.4 <= errs["draft_ms"].mean() <= 0.65
    assert 0.55 <= errs["verify_j"].mean() <= 0.9
    assert 1.9 <= errs["draft_j"].mean() <= 2.7


def test_overheads_refuse_out_of_range_constants():
    with pytest.raises(CostModelError) as e:
        Overheads(seq_ms=float("nan"), step_ms=-1.0, memory_power=1.5)
    assert isinstance(e.value, SpecsimError)
    assert len(e.value.problems) == 3
    assert dataclasses.replace(Overheads(), seq_ms=0.0).seq_ms == 0.0
    with pytest.raises(CostModelError) as e:
        Achieved(matrix_efficiency=0.0, memory_efficiency=1.5, elementwise_efficiency=0.5, op_floor_us=-1.0,
                 blend=0.5, hop_us=1.0, link_efficiency=0.5)
    assert len(e.value.problems) == 4
    with pytest.raises(CostModelError, match="unknown overheads 'graphs': use one of cuda-graph, eager"):
        Overheads.named("graphs")
