"""Ctrl-C stops every long command soon and keeps what is finished, never a damaged file.

Each test starts the command in a subprocess, waits until its work is under way, sends SIGINT
from here and expects exit code 130 long before the work could have finished; the files it
writes are then either untouched (one-shot outputs) or complete and readable (the kept results
of a sweep or a measurement). No test asserts a duration: the bound is "far sooner than the
run", the wait only keeps a broken interrupt from hanging the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specsim import _compile_ahead
from specsim._coldstart import compile_estimate
from tests.fixtures import ROOT, write_demo_inputs

# Far less than any of the runs below takes to finish on its own, far more than stopping takes.
GRACE_S = 60.0
SENTINEL = "sentinel: must stay as it was\n"


@pytest.fixture
def files(tmp_path):
    return write_demo_inputs(tmp_path)


def start(argv, tmp_path, group=False):
    """The command running in a subprocess, its stderr going to a file we can poll. ``group``:
    in a process group of its own, so :func:`interrupt` signals it as a terminal's Ctrl-C does
    (every process of the group, Dask's worker processes included)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SPECSIM_PROGRESS="1")
    err = open(tmp_path / "stderr.txt", "wb")
    # A child inherits an ignored SIGINT from a parent that ignores it; Ctrl-C must reach it.
    def child():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if group:
            os.setsid()

    proc = subprocess.Popen([sys.executable, "-m", "specsim", *map(str, argv)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=err, preexec_fn=child)
    proc.err_file = err
    proc.group = group
    return proc


def wait_for(proc, ready, what):
    deadline = time.monotonic() + GRACE_S * 5
    while not ready():
        assert proc.poll() is None, f"the command ended before {what}: {stderr(proc)}"
        assert time.monotonic() < deadline, f"no sign of {what}"
        time.sleep(0.05)


def stderr(proc) -> str:
    proc.err_file.flush()
    return Path(proc.err_file.name).read_text(errors="replace")


def interrupt(proc):
    if proc.group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("Ctrl-C did not stop the command")
    proc.err_file.close()
    text = Path(proc.err_file.name).read_text(errors="replace")
    assert proc.returncode == 130, text
    assert "Traceback" not in text
    return text


def test_simulate_with_several_policies_stops_and_writes_nothing(files):
    for name in ("out.json", "out.csv"):
        (files / name).write_text(SENTINEL)
    proc = start(["simulate", "--synthetic", "requests=3000000,rate=3000,seed=1", "--table", files / "t.toml",
                  "--calibration", files / "c.toml", "--policy", "sequence", "--policy", "propose",
                  "--policy", "fixed:2", "--json", "out.json", "--requests-csv", "out.csv"], files)
    wait_for(proc, lambda: "simulate:" in stderr(proc), "the progress line")
    time.sleep(1.0)  # well into the kernels, all three threads running
    text = interrupt(proc)
    assert "interrupted" in text
    assert (files / "out.json").read_text() == SENTINEL and (files / "out.csv").read_text() == SENTINEL
    assert not [p for p in files.iterdir() if p.name.startswith(".")]


def test_replay_with_a_huge_budget_stops(files):
    (files / "acc.toml").write_text('step_ms = [1.0, 1.5]\n[[trace]]\nname = "a"\nk_logged = 1\n'
                                    'steps = ["0110101101"]\n')
    (files / "r.json").write_text(SENTINEL)
    proc = start(["replay", "acc.toml", "--trace", "a", "--policy", "fixed:1", "--width", "1",
                  "--budget", str(10**12), "--json", "r.json"], files)
    wait_for(proc, lambda: "replay:" in stderr(proc), "the progress line")
    time.sleep(1.0)
    interrupt(proc)
    assert (files / "r.json").read_text() == SENTINEL


@pytest.mark.parametrize("how", [["--serial"], ["--workers", "2"]], ids=["serial", "dask"])
def test_sweep_stops_and_keeps_the_finished_points(files, how):
    if how[0] == "--workers":
        pytest.importorskip("dask.distributed")
    from specsim.demo import demo_trace
    from specsim.studies.sweep import read_results

    r = demo_trace(20_000, rate_scale=20.0).requests
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{a!r},{p},{o}" for a, p, o in zip(r["arrival_s"].tolist(), r["prompt_tokens"].tolist(),
                                                  r["output_tokens"].tolist())]
    (files / "trace.csv").write_text("\n".join(lines) + "\n")
    (files / "grid.toml").write_text(
        '[traces]\ntr = "trace.csv"\n[tables]\nt = "t.toml"\n[calibrations]\nc = "c.toml"\n'
        '[axes]\npolicy = ["sequence", "propose"]\nslack = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]\n'
        'seed = [1, 2, 3, 4, 5]\n')
    out = files / "r.csv"
    proc = start(["sweep", "grid.toml", *how, "-o", "r.csv"], files, group=how[0] == "--workers")

    def some_rows():
        try:
            return len(read_results(out)) >= 1
        except Exception:
            return False

    wait_for(proc, some_rows, "a finished point")
    text = interrupt(proc)
    assert "kept in" in text
    rows = read_results(out)
    assert 1 <= len(rows) < 100 and all(r["tokens_per_s"] > 0 for r in rows)
    assert not [p for p in files.iterdir() if p.name.startswith(".")]


def test_bench_stops_and_keeps_the_finished_cells(files):
    from specsim.measure.harness import read_partial

    proc = start(["bench", "--recipe", "tiny", "--widths", "1,2,4,8,16,32,64,128", "--max-k", "8",
                  "--assume-power-w", "10", "--min-window-s", "0.5", "--repeats", "3", "-o", "b.toml"], files)
    partial = files / "b.toml.partial.jsonl"
    wait_for(proc, lambda: partial.exists() and len(partial.read_text().splitlines()) >= 2, "a finished cell")
    text = interrupt(proc)
    assert "--resume" in text
    _, done = read_partial(partial)
    assert 1 <= len(done) < 72
    assert not (files / "b.toml").exists()


@pytest.mark.slow
def test_capacity_on_dask_stops_at_once_without_worker_tracebacks(files):
    """Ctrl-C at a terminal reaches the local cluster's workers too: none of them prints a
    traceback, and the command still exits 130 at once (the worker processes are ended)."""
    pytest.importorskip("dask.distributed")
    (files / "cap.json").write_text(SENTINEL)
    proc = start(["capacity", "--synthetic", "requests=100000,rate=3000,seed=1", "--table", "t.toml",
                  "--calibration", "c.toml", "--policy", "fixed:2", "--policy", "propose", "--slo-ttft-s", "0.5",
                  "--max-replicas", "64", "--workers", "2", "--json", "cap.json"], files, group=True)
    wait_for(proc, lambda: "capacity: " in stderr(proc), "a finished round of probes")
    text = interrupt(proc)
    assert "interrupted" in text and "distributed" not in text
    assert (files / "cap.json").read_text() == SENTINEL


@pytest.mark.slow
def test_tune_on_dask_stops_at_once_without_worker_tracebacks(files):
    pytest.importorskip("dask.distributed")
    (files / "s.toml").write_text(SENTINEL)
    proc = start(["tune", "--synthetic", "requests=100000,rate=1000,seed=1", "--table", "t.toml",
                  "--calibration", "c.toml", "--workers", "2", "-o", "s.toml"], files, group=True)
    wait_for(proc, lambda: "evaluations" in stderr(proc), "the first evaluations")
    text = interrupt(proc)
    assert "interrupted" in text and "distributed" not in text
    assert (files / "s.toml").read_text() == SENTINEL


def run_under_way(argv) -> float:
    """CPU seconds after which the command of ``argv`` is running its kernel: past the compile
    it will do first (none once its kernels are cached) and a few seconds into the run. On a
    machine that compiles slower than the estimate the Ctrl-C lands in the compile, which must
    stop as promptly."""
    return 5.0 + (compile_estimate([str(a) for a in argv]) or 0.0)


def cpu_seconds(proc) -> float:
    """User and system CPU time the command has used so far (Linux /proc)."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_seconds(proc):
    """Ctrl-C, then the seconds until the command has exited (with 130, no traceback)."""
    start_s = time.monotonic()
    text = interrupt(proc)
    return time.monotonic() - start_s, text


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the CPU time from /proc")


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("policies", [["sequence"], ["sequence", "fixed:2"]], ids=["one policy", "two policies"])
def test_simulate_quiet_stops_on_ctrl_c(files, policies):
    # --quiet draws no progress line: the engine must still come back between chunks of steps,
    # where the interrupt is acted on, rather than run the whole trace in one kernel call.
    (files / "out.json").write_text(SENTINEL)
    argv = ["simulate", "--synthetic", "requests=3000000,rate=3000,seed=1", "--table", files / "t.toml",
            "--calibration", files / "c.toml", "--quiet", "--json", "out.json"]
    argv += [a for p in policies for a in ("--policy", p)]
    busy = run_under_way(argv)
    proc = start(argv, files)
    wait_for(proc, lambda: cpu_seconds(proc) > busy, "the simulation under way")
    seconds, text = stop_seconds(proc)
    assert "interrupted" in text
    assert (files / "out.json").read_text() == SENTINEL
    assert not [p for p in files.iterdir() if p.name.startswith(".")]
    print(f"stopped {seconds:.2f} s after Ctrl-C")


@pytest.mark.slow
@needs_proc
def test_fleet_with_two_replicas_stops_on_ctrl_c(files):
    (files / "out.csv").write_text(SENTINEL)
    argv = ["fleet", "--synthetic", "requests=3000000,rate=3000,seed=1", "--table", files / "t.toml",
            "--calibration", files / "c.toml", "--replicas", "2", "--policy", "fixed:2", "--requests-csv", "out.csv"]
    busy = run_under_way(argv)
    proc = start(argv, files)
    wait_for(proc, lambda: cpu_seconds(proc) > busy, "the fleet simulation under way")
    seconds, text = stop_seconds(proc)
    assert "interrupted" in text
    assert (files / "out.csv").read_text() == SENTINEL
    print(f"stopped {seconds:.2f} s after Ctrl-C")


def _helper_of(proc):
    """The pid of the compile-ahead helper ``proc`` started (its one child), or None."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    pids = children.read_text().split() if children.exists() else []
    return int(pids[0]) if pids else None


def _gone(pid, within_s) -> bool:
    """Whether process ``pid`` has ended (or is a zombie no one waits for) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


needs_children = pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                                    reason="finds the helper through /proc's children list")


@pytest.mark.slow
@needs_children
@pytest.mark.skipif(_compile_ahead.usable_cpus() < 2, reason="the compile-ahead helper starts only with a second CPU")
@pytest.mark.parametrize("how", ["ctrl-c", "killed"])
def test_a_first_run_ends_its_compile_helper_with_it(files, monkeypatch, how):
    """A command's first run (an empty cache) starts the compile-ahead helper in a session of its
    own, out of reach of a terminal's Ctrl-C: Ctrl-C stops the command with 130 and the command
    ends the helper; a command killed outright leaves a helper that notices and ends itself."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(files / "cache"))
    monkeypatch.setenv("SPECSIM_COMPILE_AHEAD", "1")
    proc = start(["simulate", "--trace", ROOT / "examples" / "trace.csv", "--table", files / "t.toml",
                  "--calibration", files / "c.toml", "--policy", "sequence", "--quiet"], files, group=True)
    wait_for(proc, lambda: "compiling kernels" in stderr(proc) and _helper_of(proc) is not None, "the helper")
    helper = _helper_of(proc)
    assert os.getsid(helper) == helper != os.getsid(proc.pid)
    time.sleep(1.0)
    if how == "ctrl-c":
        interrupt(proc)
        assert _gone(helper, 1.0)
    else:
        proc.kill()
        proc.wait()
        proc.err_file.close()
        assert _gone(helper, 30.0)  # checked between two kernels: a few seconds at most


_CTRL_C_WHILE_THE_CLUSTER_STARTS = """
import os, signal, sys, threading, time
from pathlib import Path

def main():
    import dask.distributed
    from specsim._executor import Executor

    real, made = dask.distributed.LocalCluster, []
    delay = float(sys.argv[1])

    def ctrl_c():  # as a terminal sends it: to every process of the group, the workers too
        time.sleep(delay)
        os.killpg(os.getpgrp(), signal.SIGINT)

    def starting(*args, **kwargs):
        threading.Thread(target=ctrl_c).start()
        cluster = real(*args, **kwargs)
        made.extend(nanny.process.process.pid for nanny in cluster.workers.values())
        return cluster

    dask.distributed.LocalCluster = starting
    try:
        with Executor("dask", 2):
            time.sleep(3)  # a Ctrl-C that came after the cluster was up lands here
            print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    alive = []
    for pid in made:
        status = Path(f"/proc/{pid}/status")
        if status.exists() and "zombie" not in status.read_text():
            alive.append(pid)
    print("workers", len(made), "alive", len(alive))

if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8])
def test_ctrl_c_while_a_local_cluster_starts_is_not_lost(tmp_path, delay):
    """A Ctrl-C to the whole process group while a local Dask cluster starts (a few seconds of
    every Dask run's start, the workers being spawned) stops the run once the cluster is up: the
    cluster is ended, its workers first, and no worker prints a traceback. It used to be dropped
    (SIGINT ignored for the start), and then, blocked, it reached workers spawned by a thread the
    resource tracker had unblocked (tracebacks, "Nanny failed to start", exit 1)."""
    pytest.importorskip("dask.distributed")
    script = tmp_path / "starting.py"
    script.write_text(_CTRL_C_WHILE_THE_CLUSTER_STARTS)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script), str(delay)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=GRACE_S, start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "workers 2 alive 0"], done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


def test_a_ctrl_c_while_the_cluster_closes_waits_for_the_close(tmp_path):
    """The work is done and the cluster closing when a Ctrl-C comes: the close finishes (one
    interrupted inside distributed left the cluster to its exit handler, a wait of 10-30 s), then
    the interrupt is raised."""
    pytest.importorskip("dask.distributed")
    code = ("import os, signal, time\n"
            "from specsim._executor import Executor\n"
            "def main():\n"
            "    ex = Executor('dask', 2)\n"
            "    client = ex.client\n"
            "    close = client.close\n"
            "    done = []\n"
            "    def closing(*a, **k):\n"
            "        os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C, as the close begins\n"
            "        time.sleep(0.2)\n"
            "        close(*a, **k)\n"
            "        done.append('client closed')\n"
            "    client.close = closing\n"
            "    cluster = ex.cluster\n"
            "    try:\n"
            "        ex.close()\n"
            "        print('not interrupted')\n"
            "    except KeyboardInterrupt:\n"
            "        print('interrupted', *done, cluster.status.name, flush=True)\n"
            "if __name__ == '__main__':\n"
            "    main()\n"
            "    os._exit(0)  # as the command leaves: the status here, not the interpreter's\n")
    script = tmp_path / "closing.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=GRACE_S, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted client closed closed"], done.stdout + done.stderr


def test_the_exit_does_not_wait_for_abandoned_threads(tmp_path):
    """After a Ctrl-C (or an error) the command exits at once even while a pool's thread is still
    busy (compiling a kernel for seconds inside LLVM, on a first run): the exit handlers run, the
    output is flushed, and the thread is not waited for. A plain ``sys.exit`` waits for it."""
    code = ("import atexit, threading\n"
            "import specsim.cli as cli\n"
            "def command():  # a pool's thread still busy (not a daemon) when the Ctrl-C comes\n"
            "    threading.Thread(target=threading.Event().wait).start()\n"
            "    print('working', flush=False)\n"
            "    raise KeyboardInterrupt\n"
            "cli.main = command\n"
            "atexit.register(print, 'exit handlers ran')\n"
            "cli.run()\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=GRACE_S)
    assert (done.returncode, done.stdout, done.stderr) == (130, "working\nexit handlers ran\n", "")


def test_a_client_that_fails_to_connect_ends_the_cluster_it_started(tmp_path):
    """An error (or a Ctrl-C) after the local cluster is up but before the caller holds the
    executor leaves no worker running: nothing else could close it."""
    pytest.importorskip("dask.distributed")
    code = ("import os\n"
            "from pathlib import Path\n"
            "def main():\n"
            "    import dask.distributed\n"
            "    from specsim._executor import Executor\n"
            "    real, made = dask.distributed.LocalCluster, []\n"
            "    def starting(*a, **k):\n"
            "        cluster = real(*a, **k)\n"
            "        made.extend(n.process.process.pid for n in cluster.workers.values())\n"
            "        return cluster\n"
            "    def refused(*a, **k):\n"
            "        raise RuntimeError('the client did not connect')\n"
            "    dask.distributed.LocalCluster, dask.distributed.Client = starting, refused\n"
            "    try:\n"
            "        Executor('dask', 2)\n"
            "    except RuntimeError as e:\n"
            "        print(e)\n"
            "    alive = [p for p in made if Path(f'/proc/{p}/status').exists()\n"
            "             and 'zombie' not in Path(f'/proc/{p}/status').read_text()]\n"
            "    print('workers', len(made), 'alive', len(alive), flush=True)\n"
            "if __name__ == '__main__':\n"
            "    main()\n"
            "    os._exit(0)\n")
    script = tmp_path / "refused.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=GRACE_S)
    assert done.stdout.splitlines() == ["the client did not connect", "workers 2 alive 0"], done.stdout + done.stderr
