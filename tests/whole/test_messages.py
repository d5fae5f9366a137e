"""The likeliest first mistakes get a message that says what happened and what to type instead."""

from __future__ import annotations

import re

import numpy as np
import pytest

from specsim.cli import build_parser, main
from specsim.demo_inputs import demo_calibration, demo_table
from tests.fixtures import write_demo_inputs


@pytest.fixture
def files(tmp_path):
    return write_demo_inputs(tmp_path)


def run(argv):
    try:
        return main([str(a) for a in argv])
    except SystemExit as e:
        return e.code


def test_a_table_given_as_the_calibration_and_the_reverse_say_which_they_are(files, capsys):
    argv = ["simulate", "--synthetic", "requests=20,rate=1", "--policy", "fixed:1"]
    assert run(argv + ["--table", files / "c.toml", "--calibration", files / "t.toml"]) == 2
    err = capsys.readouterr().err
    assert "c.toml: the cost table cannot be read: this file is an acceptance calibration, not a cost table" in err
    assert "did you swap --calibration and --table?" in err
    assert run(argv + ["--table", files / "t.toml", "--calibration", files / "t.toml"]) == 2
    err = capsys.readouterr().err
    assert "t.toml: the acceptance calibration cannot be read: this file is a cost table" in err
    assert "did you swap --table and --calibration?" in err
    # A file that is neither gets the plain list of what is missing, no guess.
    (files / "other.toml").write_text("x = 1\n")
    assert run(argv + ["--table", files / "other.toml", "--calibration", files / "c.toml"]) == 2
    assert "swap" not in capsys.readouterr().err


def test_a_negative_value_after_a_space_says_to_write_it_after_an_equals_sign(files, capsys):
    assert run(["calib", "fit", "--edges", "-4,-2,0"]) == 2
    err = capsys.readouterr().err
    assert "argument --edges: expected one argument" in err and "write --edges=-4,-2,0" in err
    # ... and that form is read (the fit then asks for its data, not about the edges).
    assert run(["calib", "fit", "--edges=-4,-2,0"]) == 2
    assert "--edges" not in capsys.readouterr().err.split("error:")[-1]


def test_the_python_planner_refuses_positive_confidences_as_the_cli_does():
    from specsim.errors import PlanError
    from specsim.plan.planner import Planner

    planner = Planner(demo_table(), demo_calibration())
    for conf in (np.array([[0.5, -0.2]], np.float32), [[-0.5, 0.9]]):
        with pytest.raises(PlanError, match="log-probability"):
            planner.depths(conf, np.array([2]), np.array([0]), 4, 100)
    with pytest.raises(PlanError, match="log-probability"):
        planner.depths_many(np.array([[0.7]], np.float32), np.array([1]), np.array([0]), np.array([0, 1]), 4, 100)
    # Past a row's n_conf the values are padding, and rounding just above 0 is read.
    assert planner.depths(np.array([[-0.5, 0.9]], np.float32), np.array([1]), np.array([0]), 4, 100).shape == (1,)
    assert planner.depths(np.array([[0.0001]], np.float32), np.array([1]), np.array([0]), 4, 100).shape == (1,)


def test_placeholder_prefill_costs_are_said_once(files, capsys):
    text = re.sub(r"^prefill_(ms|j)_per_token = .*\n", "", (files / "t.toml").read_text(), flags=re.M)
    (files / "bare.toml").write_text(text)
    argv = ["simulate", "--synthetic", "requests=20,rate=1", "--calibration", files / "c.toml",
            "--policy", "fixed:1", "--policy", "fixed:2", "--quiet"]
    assert run(argv + ["--table", files / "bare.toml"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: prefill costs are placeholders") == 1 and "--prefill-ms-per-token" in err
    assert run(argv + ["--table", files / "bare.toml", "--prefill-ms-per-token", "0.02",
                       "--prefill-j-per-token", "0.01"]) == 0
    assert "placeholder" not in capsys.readouterr().err
    assert run(argv + ["--table", files / "t.toml"]) == 0  # the modelled table's [meta] has them
    assert "placeholder" not in capsys.readouterr().err


def test_group_helps_name_every_action():
    parser = build_parser()
    top = parser.format_help()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    for group in ("table", "calib"):
        actions = next(a for a in sub.choices[group]._actions if hasattr(a, "choices") and a.choices).choices
        line = next(line for line in top.splitlines() if line.strip().startswith(group + " "))
        own = sub.choices[group].format_help()
        for name in actions:
            assert name in line, (group, name)
            assert name in own.split("positional arguments")[0].lower(), (group, name)


def test_a_swap_of_positional_files_is_named_as_the_command_takes_them(files, capsys):
    """``plan`` takes TABLE CALIBRATION as arguments: the hint once named --calibration and --table."""
    assert run(["plan", files / "c.toml", files / "t.toml"]) == 2
    err = capsys.readouterr().err
    assert "this file is an acceptance calibration, not a cost table" in err
    assert "did you swap the cost table and the acceptance calibration? `specsim plan TABLE CALIBRATION`" in err
    assert "--table" not in err and "--calibration" not in err
    assert run(["plan", files / "t.toml", files / "t.toml"]) == 2
    err = capsys.readouterr().err
    assert "`specsim plan TABLE CALIBRATION`" in err and "--table" not in err
    assert run(["schedule", "export", "--planner", files / "c.toml", files / "t.toml", "--to", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "`specsim schedule export --planner TABLE CAL`" in err and "--table" not in err
