"""The first run of each command after an install: wall seconds with an empty Numba cache, then
warm, each in a fresh process, printed next to its target with the machine's load.

Run from the repository root: ``python benchmarks/cold_start.py`` (``--only plan`` for one; the
whole set takes a few minutes on two cores). Each command gets a Numba cache folder of its own,
empty at the start, so "cold" is what a fresh install pays; "warm" is the same command again.
"first line" is when the command's first stderr line came out (the first-use notice, when the
command compiles for more than about 2 s). "alone s" is the cold run again, in the same run of
this script, with the compile-ahead helper off (``SPECSIM_COMPILE_AHEAD=0``: one core compiles
everything; ``--no-alone`` skips it). "cpu s" is the cold run's CPU time, the helper's included
(on a loaded machine wall time grows with the load, CPU time much less). Targets hold for a 2-core machine with a load under 1.5:
on a busier one the figures grow with the load.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands(work: Path) -> list:
    """(name, argv after ``specsim``, target cold seconds)."""
    t, c, trace = work / "t.toml", work / "c.toml", ROOT / "examples" / "trace.csv"
    return [
        ("demo", ["demo", "--out", str(work / "demo")], 15.0),
        ("plan", ["plan", str(t), str(c), "--n", "8"], 5.0),
        ("table query", ["table", "query", str(t), "8", "3"], 5.0),
        ("trace show", ["trace", "show", str(trace)], 5.0),
        ("simulate", ["simulate", "--trace", str(trace), "--table", str(t), "--calibration", str(c),
                      "--policy", "propose", "--quiet"], 10.0),
    ]


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for children (and theirs: the helper's too)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv, cache: Path, ahead: bool = True) -> tuple:
    """(wall seconds, seconds to the first stderr line or None, exit code, CPU seconds)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["SPECSIM_COMPILE_AHEAD"] = "1" if ahead else "0"
    cpu = _children_cpu()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "specsim", *argv], cwd=cache.parent, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = []

    def read():
        for _ in proc.stderr:
            if not first:
                first.append(time.monotonic() - start)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    wall = time.monotonic() - start
    reader.join(5)
    return wall, (first[0] if first else None), code, _children_cpu() - cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only this command (repeatable)")
    parser.add_argument("--no-alone", action="store_true", help="skip the cold run without the compile-ahead helper")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from specsim.demo_inputs import demo_calibration, demo_table

    with tempfile.TemporaryDirectory(prefix="specsim-cold-") as tmp:
        work = Path(tmp)
        (work / "t.toml").write_text(demo_table().to_text())
        (work / "c.toml").write_text(demo_calibration().render())
        print(f"{'command':<12} {'cold s':>7} {'target':>7} {'':4} {'warm s':>7} {'first line s':>12} {'load':>5}"
              f" {'alone s':>7} {'cpu s':>6} {'alone cpu s':>11}")
        failed = False
        for name, cmd, target in commands(work):
            if args.only and name not in args.only:
                continue
            cache = work / f"cache-{name.replace(' ', '-')}"
            cache.mkdir()
            load = os.getloadavg()[0]
            cold, first, code, cold_cpu = timed(cmd, cache)
            if name == "demo":
                cmd = cmd[:2] + [str(work / "demo2")]
            warm, _, code2, _ = timed(cmd, cache)
            failed |= bool(code or code2)
            alone = alone_cpu = "-"
            if not args.no_alone:
                cache = work / f"alone-{name.replace(' ', '-')}"
                cache.mkdir()
                if name == "demo":
                    cmd = cmd[:2] + [str(work / "demo3")]
                seconds, _, code3, cpu = timed(cmd, cache, ahead=False)
                failed |= bool(code3)
                alone, alone_cpu = f"{seconds:.1f}", f"{cpu:.1f}"
            verdict = "ok" if cold <= target else "over"
            first_s = "-" if first is None else f"{first:.2f}"
            print(f"{name:<12} {cold:7.1f} {target:7.1f} {verdict:4} {warm:7.1f} {first_s:>12} {load:5.2f} {alone:>7}"
                  f" {cold_cpu:6.1f} {alone_cpu:>11}"
                  + ("" if not (code or code2) else f"  exit {code}/{code2}"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
