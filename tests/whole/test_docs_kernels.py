"""docs/simulation.md names the engine's kernels and quotes their signatures: each kernel it names
is a function of the package, each signature it quotes is that function's parameter list, and the
steps per kernel call it states are the engine's."""

from __future__ import annotations

import ast
import re

from specsim.sim.engine import PROGRESS_CHUNK
from tests.fixtures import ROOT

SIMULATION = ROOT / "docs" / "simulation.md"


def package_functions() -> dict:
    """``name -> {parameter tuple}`` of every function defined at the top of a package module."""
    out: dict = {}
    for path in sorted((ROOT / "specsim").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef):
                a = node.args
                params = tuple(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))
                out.setdefault(node.name, set()).add(params)
    return out


def code_spans(text: str) -> list:
    """The inline code spans of a markdown text, each with its line breaks folded to spaces."""
    return [" ".join(span.split()) for span in re.findall(r"`([^`\n]+(?:\n[^`\n]+)*)`", text)]


def kernel_problems(text: str, functions: dict) -> list:
    """What ``text`` says of the kernels (names ending ``_nb``) that the package does not have."""
    problems = []
    for span in code_spans(text):
        m = re.fullmatch(r"(\w+_nb)(?:\(([\w, ]*)\).*)?", span)
        if m is None:
            continue
        name, quoted = m.group(1), m.group(2)
        if name not in functions:
            problems.append(f"{name}: no such function in the package")
        elif quoted is not None:
            params = tuple(p.strip() for p in quoted.split(",") if p.strip())
            if params not in functions[name]:
                real = " or ".join(f"({', '.join(p)})" for p in sorted(functions[name]))
                problems.append(f"{name}({', '.join(params)}): the function takes {real}")
    return problems


def test_the_quoted_kernel_signatures_are_the_kernels_parameter_lists():
    text = SIMULATION.read_text(encoding="utf-8")
    quoted = [s for s in code_spans(text) if re.fullmatch(r"\w+_nb\(.*", s)]
    assert quoted, "docs/simulation.md quotes no kernel signature: the scan below would check nothing"
    assert kernel_problems(text, package_functions()) == []


def test_the_scan_catches_a_drifted_signature_and_a_missing_kernel():
    functions = {"step_nb": {("req", "st", "plan")}}
    text = ("`step_nb(req, st) -> bool` steps; `step_nb(req, st,\nplan)` too; `gone_nb` and "
            "`gone_nb(x)` are not there; `step_nb` is.")
    assert kernel_problems(text, functions) == [
        "step_nb(req, st): the function takes (req, st, plan)",
        "gone_nb: no such function in the package",
        "gone_nb: no such function in the package",
    ]


def test_the_steps_per_kernel_call_are_the_engines():
    text = " ".join(SIMULATION.read_text(encoding="utf-8").split())
    stated = re.findall(r"dispatches once per ([\d,]+) steps", text)
    assert stated == [f"{PROGRESS_CHUNK:,}"]
