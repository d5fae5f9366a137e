"""The core commands: ``specsim table check/show/query`` and ``specsim calib show``."""

import json
import os
import subprocess
import sys

import pytest

from specsim.cli import main
from tests.fixtures import CALIBRATION_TOML, ROOT


TABLE = """[key]
schema = 1
box_class = "h200"
recipe = "llama-3.1-8b/eagle-1l-bf16"

[key.plan_digests]
draft = "sha256:bb"
verify = "sha256:aa"

[meta]
energy_source = "nvml"
""" + "".join(
    f"\n[[cells]]\nn = {n}\nk = {k}\nverify_ms = {10.0 + n + k}\nverify_j = {2.0 + k}\n"
    f"draft_ms = {0.0 if k == 0 else 1.5 * k}\ndraft_j = {0.0 if k == 0 else 0.25 * k}\n"
    for n in (1, 4) for k in range(3)
)

CALIB = CALIBRATION_TOML


@pytest.fixture
def files(tmp_path):
    (tmp_path / "t.toml").write_text(TABLE)
    (tmp_path / "c.toml").write_text(CALIB)
    (tmp_path / "bad.toml").write_text(TABLE.replace("verify_ms = 11.0", "verify_ms = -1.0"))
    (tmp_path / "other.toml").write_text(TABLE.replace('"h200"', '"gb10"').replace("sha256:aa", "sha256:zz"))
    return tmp_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_check_valid(files, capsys):
    code, out, err = run(capsys, "table", "check", files / "t.toml")
    assert code == 0 and "valid; widths 1, 4; depths 0..2" in out and not err


def test_table_check_invalid_lists_problems(files, capsys):
    code, out, err = run(capsys, "table", "check", files / "bad.toml")
    assert code == 2 and not out
    assert err.startswith("specsim: error: ") and "bad.toml" in err and "cells[0]" in err and "verify_ms must be > 0" in err


def test_table_check_against_a_serve_key(files, capsys):
    code, out, _ = run(capsys, "table", "check", files / "t.toml", "--box-class", "h200", "--digest", "verify=sha256:aa",
                       "--digest", "draft=sha256:bb")
    assert code == 0 and "key matches" in out
    code, _, err = run(capsys, "table", "check", files / "t.toml", "--against", files / "other.toml")
    assert code == 2
    assert "box_class: table has 'h200', serve has 'gb10'" in err and "plan digest of mode 'verify'" in err
    assert err.index("box_class") < err.index("plan digest")
    code, _, err = run(capsys, "table", "check", files / "t.toml", "--schema", "2", "--digest", "verify=sha256:aa")
    assert code == 2 and "schema" in err and "'draft'" in err  # draft missing on the serve's side
    code, _, err = run(capsys, "table", "check", files / "t.toml", "--digest", "nodigest")
    assert code == 2 and "MODE=DIGEST" in err


def test_table_show(files, capsys):
    code, out, _ = run(capsys, "table", "show", files / "t.toml")
    assert code == 0 and "box class h200" in out and "energy source: nvml" in out
    # step ms at n=4, k=2: verify 16.0 + draft 3.0
    assert "19.000" in out.splitlines()[-1]
    code, out, _ = run(capsys, "table", "show", files / "t.toml", "--json")
    doc = json.loads(out)
    assert doc["widths"] == [1, 4] and doc["max_k"] == 2 and len(doc["cells"]) == 6
    assert doc["key"]["plan_digests"] == {"draft": "sha256:bb", "verify": "sha256:aa"}
    assert doc["cells"][-1]["step_ms"] == 19.0 and doc["meta"] == {"energy_source": "nvml"}


def test_table_query(files, capsys):
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 2, 1, "--json")
    cell = json.loads(out)
    assert code == 0 and cell["n"] == 2 and cell["verify_ms"] == 12.0 + (15.0 - 12.0) / 3
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 2, 1)
    assert "interpolated" in out
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 9, 0)
    assert code == 0 and "nearest width" in out
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 4, 0)
    assert "measured" in out and "verify_ms 14.0" in out
    code, _, err = run(capsys, "table", "query", files / "t.toml", 1, 3)
    assert code == 2 and "deepest measured depth 2" in err
    with pytest.raises(SystemExit) as refused:  # argparse refuses a negative width
        run(capsys, "table", "query", files / "t.toml", -1, 0)
    assert refused.value.code == 2


def test_calib_show(files, capsys):
    code, out, _ = run(capsys, "calib", "show", files / "c.toml")
    assert code == 0 and "vocab 32000" in out and "(-1, -0.1]" in out and "0.6000" in out
    code, out, _ = run(capsys, "calib", "show", files / "c.toml", "--json")
    doc = json.loads(out)
    assert doc["edges"] == [-1.0, -0.10000000149011612, 0.0] and doc["prior_by_position"] == [0.8, 0.6, 0.5]


@pytest.mark.parametrize("argv", [
    ["table", "check", "missing.toml"],
    ["table", "show", "c.toml"],
    ["table", "query", "bad.toml", "1", "0"],
    ["calib", "show", "t.toml"],
    ["calib", "show", "junk.toml"],
])
def test_bad_input_exits_2_without_traceback(files, argv):
    (files / "junk.toml").write_bytes(b"\xff\xfe[[[")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "specsim", *argv], cwd=files, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("specsim: error: ") and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_import_specsim_is_light():
    code = (
        "import sys, specsim\n"
        "heavy = {'numba', 'numpy', 'cupy', 'pynvml', 'matplotlib', 'dask', 'tqdm', 'hypothesis'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "specsim.CostTable, specsim.AcceptanceCalibration\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy - {'numpy'}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    # nothing heavy on import; and even the public classes load without Numba until a kernel runs
    assert p.stdout.splitlines() == ["[]", "[]"]


# -- answers a user can act on (docs/simulation.md, docs/schedules.md) ------------------------------

def test_table_query_on_a_modelled_table_says_modelled(tmp_path, capsys):
    from specsim.demo_inputs import DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL
    from specsim.costmodel.roofline import model_table

    path = tmp_path / "m.toml"
    path.write_text(model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, widths=(1, 4), max_k=2).to_text())
    code, out, _ = run(capsys, "table", "query", path, 4, 1)
    assert code == 0 and "(modelled)" in out and "measured" not in out
    code, out, _ = run(capsys, "table", "query", path, 2, 1)
    assert code == 0 and "interpolated" in out and "measured" not in out
    code, _, err = run(capsys, "table", "query", path, 4, 3)
    assert code == 2 and "deepest modelled depth 2" in err


def test_a_table_of_many_widths_is_reported_in_one_short_line(tmp_path, capsys):
    out = tmp_path / "t.toml"
    many = ",".join(map(str, range(1, 257)))
    code, printed, _ = run(capsys, "table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                           "eagle-1l", "--max-k", "1", "--widths", many, "-o", str(out))
    assert code == 0 and "widths 1, 2, 3, 4, ..., 255, 256 (256 widths); depths 0..1" in printed
    code, printed, _ = run(capsys, "table", "check", str(out))
    assert code == 0 and "valid; widths 1, 2, 3, 4, ..., 255, 256 (256 widths); depths 0..1" in printed
    code, printed, _ = run(capsys, "table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                           "eagle-1l", "--max-k", "1", "--widths", "1,2,4,8,16,24,32,48,64,96,128,256", "-o",
                           str(out))
    assert code == 0 and "widths 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256; depths" in printed  # twelve: all


def test_table_model_list_names_every_builtin_with_its_source(tmp_path, capsys):
    from specsim.costmodel.specs import BUILTIN_DRAFTERS, BUILTIN_GPUS, BUILTIN_MODELS

    code, out, _ = run(capsys, "table", "model", "--list")
    assert code == 0
    lines = out.splitlines()
    for builtins in (BUILTIN_MODELS, BUILTIN_DRAFTERS):
        for name, spec in builtins.items():
            assert f"  {name}: {spec.source}" in lines
    # A GPU's line also says its interconnect, which an engine's table prices all-reduces by.
    for name, spec in BUILTIN_GPUS.items():
        assert f"  {name} [interconnect {spec.interconnect}]: {spec.source}" in lines
    assert "  h200 [interconnect nvswitch]" in out and "  l40s [interconnect pcie]" in out
    assert not list(tmp_path.iterdir())  # nothing written
    code, _, err = run(capsys, "table", "model", "--gpu", "h200")
    assert code == 2 and "give --model or --model-config, --drafter, --max-k, -o" in err and "--list" in err


def test_help_says_the_window_applies_before_the_rate_scale(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "applied before --limit and --rate-scale" in text and "after --window and --limit" in text


def test_a_what_if_calibration_has_a_synthetic_key_refused_where_a_real_one_is_needed(tmp_path, capsys):
    from specsim.calibration import AcceptanceCalibration
    from specsim.calibration._types import what_if_key
    from specsim.errors import KeyMismatchError
    from specsim.plan import SpecCostState

    out = tmp_path / "w.toml"
    code, _, err = run(capsys, "calib", "fit", "--rates", "0.8,0.6", "--what-if", "-o", out)
    assert code == 0, err
    cal = AcceptanceCalibration.load(out)
    assert cal.drafter == what_if_key() and cal.drafter.synthetic and "what-if" in out.read_text()
    assert cal.priors.tolist() == pytest.approx([0.8, 0.75])
    # Not with a real drafter's flags, not from measured data, and a real key stays required without it.
    code, _, err = run(capsys, "calib", "fit", "--rates", "0.8", "--what-if", "--vocab", "5", "-o", tmp_path / "x.toml")
    assert code == 2 and "leave out --vocab" in err
    (tmp_path / "s.csv").write_text("drafts,accepted\n3,1\n")
    code, _, err = run(capsys, "calib", "fit", "--steps-log", tmp_path / "s.csv", "--what-if", "-o", tmp_path / "x.toml")
    assert code == 2 and "--what-if goes with --rates" in err
    code, _, err = run(capsys, "calib", "fit", "--rates", "0.8", "-o", tmp_path / "x.toml")
    assert code == 2 and "give the drafter's key" in err
    assert not (tmp_path / "x.toml").exists()
    # Where a served drafter's key is required: a serve's planner, a drift test.
    code, _, err = run(capsys, "calib", "drift", out, "--steps-log", tmp_path / "s.csv")
    assert code == 2 and "what-if calibration" in err
    from specsim.demo_inputs import demo_table

    (tmp_path / "t.toml").write_text(demo_table().to_text())
    with pytest.raises(KeyMismatchError, match="what-if calibration"):
        SpecCostState.load(tmp_path / "t.toml", out, demo_table().key, what_if_key(), 0.0)


def test_the_readme_policy_list_names_every_policy():
    from specsim.policy.policy import KINDS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = text[text.index("Policies everywhere are"):].split("\n\n", 1)[0]
    for kind in KINDS:
        if kind != "sglang-adaptive":  # an engine's controller, listed with the engine configs
            assert f"`{kind}" in paragraph, kind


def test_a_command_line_that_names_a_command_builds_its_parser_from_its_modules_alone():
    """COMMAND_WORDS names, for each command, the modules that add it or add actions to its group
    and the modules whose groups those use: the parser built for that command alone reads and
    helps exactly as the whole one does, for every command the whole one has."""
    import importlib

    from specsim.cli import COMMAND_MODULES, COMMAND_WORDS, Parser, build_parser

    parser = Parser(prog="specsim")
    sub = parser.add_subparsers(dest="command")
    groups, adds, makes, uses = {}, {}, {}, {}
    for name in COMMAND_MODULES:
        before, used = set(sub.choices), set(groups)
        seen = {g: set(p.choices) for g, p in groups.items()}
        importlib.import_module(name).register(sub, groups)
        for word in set(sub.choices) - before:
            adds.setdefault(word, []).append(name)
        for g in set(groups) - used:
            makes[g] = name
        uses[name] = {g for g in used if set(groups[g].choices) - seen[g]}
        for g in uses[name]:
            adds.setdefault(g, []).append(name)
    expected = {}
    for word, names in adds.items():
        need = set(names) | {makes[g] for n in names for g in uses[n]}
        expected[word] = tuple(m for m in COMMAND_MODULES if m in need)
    assert COMMAND_WORDS == expected
    whole = build_parser()
    whole_sub = next(a for a in whole._actions if a.dest == "command")
    assert set(COMMAND_WORDS) == set(whole_sub.choices)
    for word in COMMAND_WORDS:
        one = build_parser([word, "--help"])
        one_sub = next(a for a in one._actions if a.dest == "command")
        assert set(one_sub.choices) <= set(whole_sub.choices) and word in one_sub.choices
        assert one_sub.choices[word].format_help() == whole_sub.choices[word].format_help(), word
    for argv in ([], ["--help"], ["simulat"], ["--version"]):
        built = next(a for a in build_parser(argv)._actions if a.dest == "command")
        assert set(built.choices) == set(whole_sub.choices), argv


def test_simulate_imports_no_other_commands_domain():
    code = ("import sys; from specsim.cli import build_parser; build_parser(['simulate', '--policy', 'fixed:1']); "
            "print(' '.join(m for m in ('specsim.cli.demo', 'specsim.cli.sweep', 'specsim.cli.tune', "
            "'specsim.cli.capacity', 'specsim.cli.calib', 'specsim.studies.tune') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT))
    assert done.returncode == 0 and done.stdout.strip() == "", done.stderr + done.stdout
