"""The repository stands on its own: nothing in the package, the tests, the benchmarks, the
examples, the README, the docs or any ``--help`` text points the reader to a document they do not
have. Rules and formats are explained in the project's words, in docs/*.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures import ROOT


# Built from pieces, so that this file does not hold the very strings it looks for.
_RULES = {
    "a section citation": re.compile("\u00a7"),
    "a citation of an outside spec": re.compile(r"\bSP" + r"EC\b"),
    # A random seed (as in "seed of the draws") is fine; the outside reference implementation is not.
    "a citation of an outside reference implementation": re.compile(
        r"(?i)\bthe se" + r"ed\b(?!\s+(of|value|argument|=))"),
    "a citation of an issue": re.compile(r"(?i)\bissu" + r"e:"),
    "a machine path": re.compile("/wo" + r"rk/|\.libr" + "ary"),
}

_TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".json", ".jsonl", ".csv", ".sh", ".yml", ".yaml"}


def _project_files():
    """Text files the project writes: package, tests, benchmarks, examples, docs, README.

    ``tests/data`` holds third-party data with its publishers' own READMEs; only the READMEs
    written for this project there are checked.
    """
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for folder in ("specsim", "tests", "benchmarks", "examples", "docs"):
        base = ROOT / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix.lower() not in _TEXT_SUFFIXES:
                continue
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("tests", "data") and path.name != "README.md":
                continue
            if path == Path(__file__).resolve():
                continue
            files.append(path)
    return [f for f in files if f.is_file()]


def _hits(text):
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for what, rule in _RULES.items():
            if rule.search(line):
                out.append((lineno, what, line.strip()[:160]))
    return out


def test_the_scan_sees_the_package_tests_and_docs():
    files = {f.relative_to(ROOT).as_posix() for f in _project_files()}
    assert "specsim/__init__.py" in files and "README.md" in files
    assert "tests/conftest.py" in files and "docs/README.md" in files
    assert "tests/data/README.md" in files
    assert not any(f.startswith("tests/data/") and not f.endswith("README.md") for f in files)


@pytest.mark.parametrize("text, caught", [
    ("see " + "SP" + "EC \u00a71.2 for the rules", True),
    ("as " + "the se" + "ed's reader does", True),
    ("The se" + "ed writes floats", True),
    ("(issu" + "e: sweeps)", True),
    ("from /wo" + "rk/shared/data", True),
    ("USER_SPECS = parse_specs(text)", False),
    ("the se" + "ed of the draft outcomes", False),
    ("--synthetic requests=N,seed=S", False),
    ("see docs/tables.md#validation", False),
])
def test_the_rules_catch_citations_and_spare_plain_words(text, caught):
    assert bool(_hits(text)) is caught


def test_no_file_cites_an_outside_document():
    problems = []
    for path in _project_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, what, line in _hits(text):
            problems.append(f"{path.relative_to(ROOT)}:{lineno}: {what}: {line}")
    assert not problems, "explain in the project's words or link docs/<page>.md#heading:\n" + "\n".join(problems)


def _all_parsers():
    from specsim.cli import build_parser

    seen, todo = [], [(["specsim"], build_parser())]
    while todo:
        path, parser = todo.pop()
        seen.append((path, parser))
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    todo.append((path + [name], sub))
    return seen


def test_every_command_is_walked():
    paths = {" ".join(p) for p, _ in _all_parsers()}
    assert {"specsim", "specsim table", "specsim calib fit", "specsim simulate", "specsim bench"} <= paths


def test_no_help_text_cites_an_outside_document():
    problems = []
    for path, parser in _all_parsers():
        for lineno, what, line in _hits(parser.format_help()):
            problems.append(f"{' '.join(path)} --help, line {lineno}: {what}: {line}")
    assert not problems, "\n".join(problems)


def test_test_data_stays_out_of_the_wheel_and_the_sdist():
    from specsim._toml import tomllib  # tomli before Python 3.11

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["specsim*"]  # only the package: tests/ is no package of the wheel
    manifest = [line.split() for line in (ROOT / "MANIFEST.in").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert ["prune", "tests"] in manifest  # the sdist leaves out tests/ and its data
    assert not any(f.suffix == ".py" for f in (ROOT / "tests" / "data").rglob("*"))  # never importable


def _slug(heading: str) -> str:
    """The anchor a Markdown heading gets (as GitHub makes it)."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set:
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def test_slugs_follow_the_markdown_rule():
    assert _slug("Bucket probabilities (pools)") == "bucket-probabilities-pools"
    assert _slug("The `[meta]` table") == "the-meta-table"


def test_every_docs_link_reaches_a_page_and_heading():
    """``docs/page.md#heading`` anywhere in the project, and relative links inside docs/."""
    problems = []
    for path in _project_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        refs = [(m.group(1), m.group(2)) for m in re.finditer(r"docs/([\w.-]+\.md)(?:#([\w-]+))?", text)]
        if path.parent == ROOT / "docs":
            refs += [(m.group(1), m.group(2)) for m in re.finditer(r"\]\(([\w.-]+\.md)(?:#([\w-]+))?\)", text)]
            refs += [(path.name, m.group(1)) for m in re.finditer(r"\]\(#([\w-]+)\)", text)]
        for page, anchor in refs:
            target = ROOT / "docs" / page
            if not target.is_file():
                problems.append(f"{path.relative_to(ROOT)}: links docs/{page}, which does not exist")
            elif anchor and anchor not in _anchors(target):
                problems.append(f"{path.relative_to(ROOT)}: docs/{page} has no heading #{anchor}")
    assert not problems, "\n".join(sorted(set(problems)))


# -- the import graph --------------------------------------------------------------------------------

import ast  # noqa: E402  (the graph tests' own tools)

# The package's imports sit at module top, so the import graph is the real one; laziness lives in
# ``specsim/__init__.py`` (PEP 562) and in the optional heavy packages (matplotlib, dask, cupy,
# pandas). The few ``specsim`` imports below module top, each with its reason:
KERNELS_ON_FIRST_USE = "the value classes load without Numba; their kernels load with the first call"
LAZY_IMPORTS = {
    ("specsim._console", "specsim.cli"): "a Ctrl-C while the command modules load exits 130 without a traceback",
    ("specsim.calibration.calibration", "specsim.calibration._kernels"): KERNELS_ON_FIRST_USE,
    ("specsim.calibration.calibration", "specsim.calibration"): KERNELS_ON_FIRST_USE,  # its _kernels module
    ("specsim.calibration.drift", "specsim.calibration._online_kernels"): KERNELS_ON_FIRST_USE,
    ("specsim.calibration.online", "specsim.calibration._online_kernels"): KERNELS_ON_FIRST_USE,
    ("specsim.calibration.logs", "specsim.calibration._fit_kernels"): KERNELS_ON_FIRST_USE,
    ("specsim.table.cost_table", "specsim.table._kernels"): KERNELS_ON_FIRST_USE,
    ("specsim.traces.readers", "specsim.traces._parse_kernels"): KERNELS_ON_FIRST_USE,
    ("specsim._coldstart", "specsim"): "the compile-ahead helper's module (and subprocess) load only on a first run, "
                                       "so a Ctrl-C at a command's start finds less to interrupt",
    **{("specsim._compile_ahead", m): "only the helper process builds the engine's bundles; the command that "
       "starts it loads nothing for it" for m in ("specsim.demo_inputs", "specsim.policy.policy", "specsim.sim.bundles",
                                                 "specsim.sim.engine", "specsim.sim.options", "specsim.traces._types")},
}


def _modules() -> dict:
    """``dotted name -> path`` of every module of the package (a package is its ``__init__``)."""
    out = {}
    for path in sorted((ROOT / "specsim").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, node, modules: dict) -> set:
    """The package modules one import statement of module ``name`` runs: the named module, each
    package above it (Python runs their ``__init__`` first) and, for ``from P import m``, the
    submodule ``m``; packages above ``name`` itself are left out (they are running already)."""
    named = set()
    if isinstance(node, ast.Import):
        named = {a.name for a in node.names if a.name.split(".")[0] == "specsim"}
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "specsim":
        named = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    out = set()
    for target in named:
        parts = target.split(".")
        for i in range(2, len(parts) + 1):
            out.add(".".join(parts[:i]))
    return {t for t in out if t in modules and t != name and not name.startswith(t + ".")}


def _import_graph():
    """``module -> modules it imports`` (at module top and inside functions), and the set of
    ``(module, imported module)`` of the package imports below module top."""
    modules = _modules()
    graph, nested = {}, set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        top = {id(n) for n in tree.body}
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found = _imports(name, node, modules)
                edges |= found
                if found and id(node) not in top:
                    nested.add((name, node.module if isinstance(node, ast.ImportFrom) else node.names[0].name))
        graph[name] = edges
    return graph, nested


def _cycles(graph) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle_and_spares_a_chain():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_package_has_no_import_cycles():
    graph, _ = _import_graph()
    assert len(graph) > 100 and graph["specsim.sim.engine"]
    assert _cycles(graph) == [], "modules that import each other (directly or round a loop)"


def test_imports_sit_at_module_top_but_the_listed_lazy_ones():
    _, nested = _import_graph()
    assert nested <= set(LAZY_IMPORTS), (
        f"specsim imports below module top: {sorted(nested - set(LAZY_IMPORTS))}; put them at module top "
        "(or list one in LAZY_IMPORTS with its reason)")


def test_the_lower_folders_do_not_import_the_commands_or_the_studies():
    graph, _ = _import_graph()
    lower = ("specsim.sim", "specsim.interop", "specsim.policy", "specsim.plan", "specsim.calibration", "specsim.table")
    upper = ("specsim.cli", "specsim.studies")
    wrong = sorted((m, t) for m, ts in graph.items() if m.startswith(lower)
                   for t in ts if t.startswith(upper))
    assert wrong == [], "docs/README.md, 'Where the code lives': imports run from the commands and studies down"


import sys  # noqa: E402  (the standard library's module names)


def _nested_stdlib_imports(tree, name: str) -> set:
    """``(module, imported standard-library module)`` of each import inside a function of ``tree``."""
    out = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    out |= {(name, a.name) for a in node.names if a.name.split(".")[0] in sys.stdlib_module_names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 \
                        and node.module.split(".")[0] in sys.stdlib_module_names:
                    out.add((name, node.module))
    return out


def test_the_nested_import_scan_finds_a_standard_library_import_in_a_function():
    tree = ast.parse("import os\ndef f():\n    import json\n    from numpy import array\n    return json\n")
    assert _nested_stdlib_imports(tree, "m") == {("m", "json")}


def test_the_simulated_servers_modules_re_export_nothing():
    """A name imported into a module of ``specsim/sim/`` only to be imported from there again
    (``# noqa: F401``) hides who depends on its owner: importers name the owner."""
    found = []
    for name, path in _modules().items():
        if name.startswith("specsim.sim"):
            found += [f"{name}:{i}" for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                      if line.startswith("from ") and "noqa: F401" in line]
    assert found == [], "import these names from the module that defines them"


def test_standard_library_imports_sit_at_module_top():
    found = set()
    for name, path in _modules().items():
        found |= _nested_stdlib_imports(ast.parse(path.read_text(encoding="utf-8")), name)
    assert found == set(), f"import these at module top: {sorted(found)}"


def test_the_noise_statistics_have_one_home():
    """Wilson's interval, the Student t quantile and the paired noise live in ``specsim/_stats.py``;
    a second definition of one, or of the 95% normal quantile, is a twin that can drift."""
    twins = []
    for name, path in _modules().items():
        if name == "specsim._stats":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        twins += [f"{name}: def {n.name}" for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                  and n.name.lstrip("_") in ("wilson", "t95", "paired_noise")]
        twins += [f"{name}: {n.value}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                  and isinstance(n.value, float) and abs(n.value - 1.959963984540054) < 1e-9]
    assert twins == [], "import them from specsim._stats"


# A module past this many lines says at its top why it is one module.
LONG_MODULE_LINES = 600


def test_a_long_module_says_why_it_is_one():
    silent = []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > LONG_MODULE_LINES and "Why one module" not in (ast.get_docstring(ast.parse(text)) or ""):
            silent.append(name)
    assert silent == [], f"modules over {LONG_MODULE_LINES} lines with no 'Why one module ...' in their docstring"


# -- internal kernels: no CPython wrapper, so never called from Python -------------------------------

def _internal(call) -> bool:
    return isinstance(call, ast.Call) and any(k.arg == "internal" and getattr(k.value, "value", None) is True
                                               for k in call.keywords)


def _jit_aliases(tree, internal_only=False) -> set:
    """A module's module-level aliases of ``jit(...)`` (``step_part = jit(..., internal=True)``);
    ``internal_only``: of those built with ``internal=True`` alone."""
    return {t.id for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "jit" and (_internal(node.value) or not internal_only)
            for t in node.targets if isinstance(t, ast.Name)}


def _imported(tree, names: set) -> set:
    """The names of ``names`` a module imports from the package (an alias one module defines and
    the engine's other kernel modules import)."""
    return {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "specsim" for a in node.names if a.name in names}


def _internal_kernels(tree, imported=frozenset()) -> set:
    """Names of a module's kernels built with ``internal=True`` (directly, or through an alias
    such as ``step_part = jit(..., internal=True)``, of the module's own or ``imported``)."""
    aliases = _jit_aliases(tree, internal_only=True) | set(imported)
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(_internal(d) or (isinstance(d, ast.Name) and d.id in aliases) for d in node.decorator_list)}


def _python_uses(tree, names: set, imported=frozenset()) -> set:
    """The names of ``names`` that code outside any compiled function (one decorated with
    ``jit``, ``njit`` or an alias of ``jit(...)``, the module's own or ``imported``) refers to."""
    found = set()
    jits = {"jit", "njit"} | _jit_aliases(tree) | set(imported)

    def jitted(d) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return (d.id if isinstance(d, ast.Name) else getattr(d, "attr", None)) in jits

    def visit(node, compiled):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            compiled = compiled or any(jitted(d) for d in node.decorator_list)
        if isinstance(node, ast.Name) and node.id in names and not compiled:
            found.add(node.id)
        if isinstance(node, ast.Attribute) and node.attr in names and not compiled:
            found.add(node.attr)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.Import, ast.ImportFrom)):
                visit(child, compiled)

    visit(tree, False)
    return found


def test_no_python_code_calls_an_internal_kernel():
    """A kernel compiled with ``internal=True`` has no CPython wrapper, and a call from Python
    crashes the interpreter: only compiled code (a decorated function) may name one."""
    files = [p for d in ("specsim", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    package = [t for p, t in trees.items() if "specsim" in p.parts]
    internal_aliases = set().union(*(_jit_aliases(t, internal_only=True) for t in package))
    jit_aliases = set().union(*(_jit_aliases(t) for t in package))
    internal = set().union(*(_internal_kernels(t, _imported(t, internal_aliases)) for t in package))
    assert {"step_nb", "apply_nb", "sequence_depths_nb", "draft_hash_nb"} <= internal  # the scan sees them
    assert "run_nb" not in internal and "parse_csv_nb" not in internal
    used = {f"{p.relative_to(ROOT)}: {name}" for p, t in trees.items()
            for name in _python_uses(t, internal, _imported(t, jit_aliases))}
    assert not used, sorted(used)


def test_the_internal_kernel_scan_catches_a_python_call():
    tree = ast.parse("step = jit(internal=True)\n@step\ndef f(x):\n    return x\n"
                     "@jit(internal=True)\ndef g(x):\n    return f(x)\n"
                     "@pytest.mark.slow\ndef h(x):\n    return g(x) + mod.f(x)\n")
    assert _internal_kernels(tree) == {"f", "g"}
    assert _python_uses(tree, {"f", "g"}) == {"f", "g"}
    assert _python_uses(ast.parse("@step\ndef k(x):\n    return f(x)\nstep = jit()\n"), {"f"}) == set()
    # An alias one module defines and another imports: its kernels are internal there too, and
    # compiled code that names them is not a Python call.
    other = ast.parse("from specsim.sim.base import step\n@step\ndef e(x):\n    return f(x)\n"
                      "def p(x):\n    return e(x)\n")
    assert _jit_aliases(tree, internal_only=True) == {"step"} and _imported(other, {"step"}) == {"step"}
    assert _internal_kernels(other) == set() and _internal_kernels(other, {"step"}) == {"e"}
    assert _python_uses(other, {"e", "f"}, {"step"}) == {"e"}
    assert _python_uses(other, {"e", "f"}) == {"e", "f"}


def test_the_release_keeps_its_version_in_one_place_and_ships_its_licences():
    from specsim import __version__
    from specsim._toml import tomllib  # tomli before Python 3.11

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    meta = project["project"]
    # The distribution's name is not "specsim" (an unrelated package holds it on PyPI); the command is.
    assert meta["name"] != "specsim" and meta["scripts"]["specsim"] == "specsim._console:run"
    assert "version" not in meta and meta["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "specsim.__version__"}
    # The changelog starts at this version.
    first = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert first.split()[1] == __version__
    # The licences named in the metadata exist, and the sdist's manifest takes them too.
    for pattern in meta["license-files"]:
        assert list(ROOT.glob(pattern)), pattern
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    assert {"LICENSE-MIT", "LICENSE-APACHE", "LICENSES", "CHANGELOG.md"} <= set(manifest)
    # What every file specsim writes calls its version is this one.
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_specsim_version_prints_the_package_version(capsys):
    from specsim import __version__
    from specsim.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"specsim {__version__}"
