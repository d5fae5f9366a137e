"""Where many independent simulations run: serially, on threads of this process, or on Dask.

The one home for starting a Dask cluster (sweep, capacity and tune run on it) and for the pool of
threads that simulates several policies side by side. Nothing here binds a fixed port: a local
cluster's scheduler and its HTTP server (the dashboard, or distributed's metrics page when no
dashboard is installed) take ports the system picks, so two clusters, or another program on port
8787, never collide.

Ctrl-C while work runs: the results that arrived are already with the caller (``on_result``), the
threads are told to stop (``Executor.stop``), a local cluster's worker processes are ended at once
and Dask's shutdown messages are silenced; the ``KeyboardInterrupt`` goes on to the caller.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import resource_tracker

from specsim._checks import MAX_WORKERS, is_int, show
from specsim._io import no_interrupt
from specsim.errors import SpecsimError

KINDS = ("serial", "threads", "dask")
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")
# How long a run waits for a named scheduler to answer.
CONNECT_TIMEOUT = "20s"


class ExecutorError(SpecsimError):
    """An executor that cannot run: a worker count out of range, a scheduler that is not one."""


def check_workers(n, what="--workers"):
    """``n`` (None: the CPU count) as a worker count in ``1..MAX_WORKERS``, or an ExecutorError."""
    if n is None:
        return max(1, min(os.cpu_count() or 1, MAX_WORKERS))
    if not is_int(n):
        raise ExecutorError(f"{what} must be a whole number of workers, got {show(n)}")
    n = int(n)
    if not 1 <= n <= MAX_WORKERS:
        raise ExecutorError(f"{what} {show(n, render='{:,}'.format)} is outside 1..{MAX_WORKERS}: more workers than that do not fit the "
                            f"machine a run is sized for (docs/limits.md); leave it out for one per CPU")
    return n


def check_scheduler(address) -> None:
    """Refuse a scheduler address that is not ``[SCHEME://]HOST:PORT`` (before any work)."""
    m = re.fullmatch(r"(?:([a-z]+)://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", str(address))
    if m is None or (m.group(1) or "tcp") not in SCHEDULER_SCHEMES or not 0 < int(m.group(3)) < 65536:
        raise ExecutorError(f"--scheduler {show(address)} is not a Dask scheduler address: give "
                            f"[SCHEME://]HOST:PORT, e.g. tcp://10.0.0.5:8786 (schemes: {', '.join(SCHEDULER_SCHEMES)})")


def have_dask() -> bool:
    """Whether ``dask.distributed`` can be imported."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return False
    return True


class Executor:
    """Runs calls of one function and hands back their results in call order.

    Parameters
    ----------
    kind : {"serial", "threads", "dask"}
    workers : int, optional
        Threads, or processes of a local Dask cluster (default: the CPU count; at most
        ``MAX_WORKERS``). With ``scheduler`` the cluster's own workers count instead.
    scheduler : str, optional
        Address of a running Dask scheduler (``kind="dask"`` only); without one a local cluster
        starts, and is ended by :meth:`close`.

    Use as a context manager. ``stop`` is set when a run is abandoned (an error or Ctrl-C): a
    long call on a thread can poll it to end early.
    """

    def __init__(self, kind="serial", workers=None, scheduler=None):
        if kind not in KINDS:
            raise ExecutorError(f"executor {kind!r}: use one of {', '.join(KINDS)}")
        if scheduler is not None:
            check_scheduler(scheduler)
            if kind != "dask":
                raise ExecutorError(f"a Dask scheduler runs the work on Dask, not {kind}: give one or the other")
        self.kind = kind
        self.workers = 1 if kind == "serial" else check_workers(workers)
        self.stop = threading.Event()
        self.client = self.cluster = None
        self._shared = {}
        if kind == "dask":
            self._start_dask(scheduler)

    # -- Dask -------------------------------------------------------------------------------------

    def _start_dask(self, scheduler):
        from dask.distributed import Client  # optional (the dist extra): loaded only when Dask runs the work

        if scheduler:
            try:
                self.client = Client(scheduler, timeout=CONNECT_TIMEOUT)
            except Exception as e:  # Dask raises OSError, TimeoutError, ValueError ... by transport
                raise ExecutorError(f"cannot reach the Dask scheduler at {show(scheduler)}: "
                                    f"{show(str(e), 200)}") from None
        else:
            self.cluster = _local_cluster(self.workers)
        try:
            if self.client is None:
                self.client = Client(self.cluster)
            self.workers = len(self.client.scheduler_info()["workers"]) or self.workers
        except BaseException:  # a Ctrl-C or an error before the caller holds the executor to close it
            client, cluster, self.client, self.cluster = self.client, self.cluster, None, None
            abandon(client, cluster)
            raise

    def share(self, value):
        """``value`` as an argument of many calls: on Dask it travels to each worker once."""
        if self.kind != "dask":
            return value
        key = id(value)
        if key not in self._shared:
            self._shared[key] = (value, self.client.scatter(value, broadcast=True, hash=False))
        return self._shared[key][1]

    # -- running ----------------------------------------------------------------------------------

    def map(self, fn, calls, on_result=None, keys=None) -> list:
        """``[fn(*c) for c in calls]``, spread over the workers; ``on_result(i, result)`` runs in
        this thread as each call finishes (in finishing order), so a caller can save as it goes.
        ``keys`` names the calls on Dask (one string per call)."""
        calls = [tuple(c) for c in calls]
        if not calls:
            return []
        try:
            if self.kind == "dask":
                return self._map_dask(fn, calls, on_result, keys)
            if self.kind == "serial" or self.workers <= 1 or len(calls) == 1:
                out = []
                for i, c in enumerate(calls):
                    out.append(fn(*c))
                    if on_result is not None:
                        on_result(i, out[-1])
                return out
            return self._map_threads(fn, calls, on_result)
        except BaseException:
            self.stop.set()
            raise

    def feed(self, fn, pick, on_result) -> None:
        """Calls ``fn(*call)`` chosen as workers free up: ``pick()`` hands out the next call (a
        tuple), or None when none is wanted now; ``on_result(call, result)`` runs in this thread as
        each call finishes (in finishing order) and may change what ``pick`` hands out next.
        Returns when no call runs and ``pick()`` gives None. Threads (one call at a time when
        serial or with one worker); an error ends it as in :meth:`map`."""
        if self.kind == "dask":
            raise ExecutorError("feed runs on threads of this process, not on Dask")
        try:
            if self.kind == "serial" or self.workers <= 1:
                call = pick()
                while call is not None:
                    on_result(call, fn(*call))
                    call = pick()
                return
            self._feed_threads(fn, pick, on_result)
        except BaseException:
            self.stop.set()
            raise

    def _feed_threads(self, fn, pick, on_result):
        pool = ThreadPoolExecutor(max_workers=self.workers)
        running, done_ok = {}, False
        try:
            while True:
                while len(running) < self.workers:
                    call = pick()
                    if call is None:
                        break
                    running[pool.submit(fn, *call)] = call
                if not running:
                    break
                # Short waits keep this thread where Ctrl-C reaches it.
                done, _ = wait(running, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in done:
                    on_result(running.pop(f), f.result())
            done_ok = True
        finally:
            if not done_ok:
                self.stop.set()
            pool.shutdown(wait=done_ok, cancel_futures=True)

    def _map_threads(self, fn, calls, on_result):
        pool = ThreadPoolExecutor(max_workers=min(self.workers, len(calls)))
        done_ok = False
        try:
            futures = [pool.submit(fn, *c) for c in calls]
            index = {f: i for i, f in enumerate(futures)}
            pending = set(futures)
            while pending:
                # Short waits keep this thread where Ctrl-C reaches it.
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=index.get):
                    result = f.result()  # a call's error ends the run (the others are told to stop)
                    if on_result is not None:
                        on_result(index[f], result)
            done_ok = True
            return [f.result() for f in futures]
        finally:
            if not done_ok:
                self.stop.set()
            # An abandoned run does not wait for calls still inside a kernel.
            pool.shutdown(wait=done_ok, cancel_futures=True)

    def _map_dask(self, fn, calls, on_result, keys):
        from dask.distributed import as_completed  # optional (the dist extra): loaded only when Dask runs the work

        kw = [{"key": k} for k in keys] if keys is not None else [{}] * len(calls)
        futures = [self.client.submit(fn, *c, pure=False, **k) for c, k in zip(calls, kw)]
        index = {f.key: i for i, f in enumerate(futures)}
        results = [None] * len(calls)
        for fut in as_completed(futures):
            results[index[fut.key]] = fut.result()
            if on_result is not None:
                on_result(index[fut.key], results[index[fut.key]])
        return results

    # -- ending -----------------------------------------------------------------------------------

    def close(self, abandoned=False):
        """End the client and a local cluster; ``abandoned`` (an error or Ctrl-C): at once."""
        if self.client is None:
            return
        client, cluster, self.client, self.cluster = self.client, self.cluster, None, None
        if not abandoned:
            # The work is done: a Ctrl-C now waits for the close (a second or two; one inside
            # distributed's close can leave the cluster for its exit handler, which waits half a
            # minute), then raises. An error ends the cluster now, not at the interpreter's exit.
            with no_interrupt():
                try:
                    client.close()
                    if cluster is not None:
                        cluster.close()
                except BaseException:
                    abandon(client, cluster)
                    raise
            return
        abandon(client, cluster)

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        self.close(abandoned=kind is not None)
        return False


def _local_cluster(workers):
    """A local cluster of ``workers`` single-threaded processes on ports the system picks.

    The workers never see SIGINT: a Ctrl-C at a terminal reaches the whole process group, and
    this process, not each worker, decides what it means (see :meth:`Executor.close`). While the
    cluster starts, SIGINT is blocked in this thread; the cluster's threads inherit the block, and
    so do the worker processes they spawn, for good. A Ctrl-C meanwhile is held, or noted if a
    thread started before (a BLAS thread of NumPy's) takes it, and once the cluster is up it ends
    the cluster and raises ``KeyboardInterrupt``.
    """
    from dask.distributed import LocalCluster  # optional (the dist extra): loaded only when Dask runs the work

    def start():
        # Turning the dashboard off with None still binds port 8787 (distributed's HTTP server starts anyway);
        # ":0" and scheduler_port=0 let the system pick free ports.
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, scheduler_port=0,
                            dashboard_address=":0")

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return start()
    # Started now, not by the cluster: multiprocessing starts its resource tracker with SIGINT
    # blocked and then unblocks it in the starting thread, which would undo the block there, and
    # the workers that thread spawns would take a Ctrl-C (each printing a traceback).
    resource_tracker.ensure_running()
    cluster = None
    try:
        with no_interrupt():  # a Ctrl-C meanwhile is raised once the cluster is up
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                cluster = start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a held Ctrl-C is noted here
    except KeyboardInterrupt:
        if cluster is not None:
            abandon(None, cluster)
        raise
    return cluster


def abandon(client, cluster) -> None:
    """End a run's Dask client and local cluster at once, quietly (an error or Ctrl-C)."""
    _quiet_dask()
    _kill_workers(cluster)
    for close in (None if client is None else client.close, None if cluster is None else cluster.close):
        if close is None:
            continue
        try:
            close(timeout=1)
        except BaseException:  # noqa: BLE001  (abandoning the run: nothing left to save)
            pass


def _quiet_dask() -> None:
    """Silence Dask's loggers, each of them: distributed configures levels per module
    (``distributed.scheduler`` ...), which a level on the parent would not override."""
    roots = ("distributed", "tornado", "asyncio")
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in roots]
    for name in set(roots) | set(names):
        log = logging.getLogger(name)
        log.setLevel(logging.CRITICAL + 1)
        log.disabled = True


def _kill_workers(cluster) -> None:
    """End a local cluster's worker processes now (a worker cannot stop inside a kernel)."""
    if cluster is None:
        return  # an existing cluster's workers are not ours to stop
    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def choose(kind="auto", workers=None, scheduler=None, what="specsim", fallback="serial") -> Executor:
    """The executor a command asked for: ``auto`` is Dask when it is installed (a local cluster,
    or ``scheduler``), else ``fallback`` with one note on stderr."""
    if kind not in ("auto", *KINDS):
        raise ExecutorError(f"executor {kind!r}: use one of auto, {', '.join(KINDS)}")
    if workers is not None:
        check_workers(workers)
    if scheduler is not None:
        check_scheduler(scheduler)
        if kind in ("threads", "serial"):
            raise ExecutorError(f"a Dask scheduler runs the work on Dask, not {kind}: give one or the other")
    if kind in ("auto", "dask") or scheduler:
        if have_dask():
            return Executor("dask", workers, scheduler)
        if kind == "dask" or scheduler:
            raise ExecutorError("Dask is not installed (pip install 'specsim-llm[dist]'); use threads or serial")
        how = "serially" if fallback == "serial" else "on threads"
        print(f"{what}: dask.distributed is not installed: running {how} in this process "
              "(pip install 'specsim-llm[dist]' to spread the work over worker processes)", file=sys.stderr)
        kind = fallback
    return Executor(kind, workers, None)


@dataclass(frozen=True)
class ExecutorChoice:
    """An executor asked for but not started yet (:func:`choose`'s arguments): a study takes it
    and starts it once its inputs have passed their checks, so a refusal starts no cluster."""

    kind: str = "auto"
    workers: int = None
    scheduler: str = None

    def start(self, what="specsim", fallback="serial") -> Executor:
        """:func:`choose` with these arguments."""
        return choose(self.kind, self.workers, self.scheduler, what=what, fallback=fallback)
