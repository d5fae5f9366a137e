"""The ``specsim`` command: one sub-command module per domain, registered below."""

from __future__ import annotations

import _thread
import argparse
import atexit
import gc
import importlib
import os
import re
import signal
import sys
import threading
import time

from specsim import __version__
from specsim._coldstart import announce
from specsim.errors import SpecsimError, clip, printable

# Each module defines ``register(sub, groups)``: it adds its commands to ``sub`` with
# ``set_defaults(func=...)`` (``func(args)`` returns the exit code), and may add actions to a group
# an earlier module made (``groups["table"]``, ``groups["calib"]``: sub-parser collections).
COMMAND_MODULES = (
    "specsim.cli.demo",
    "specsim.cli.table",
    "specsim.cli.calib",
    "specsim.cli.plan",
    "specsim.cli.tree",
    "specsim.cli.model",
    "specsim.cli.bench",
    "specsim.cli.trace",
    "specsim.cli.simulate",
    "specsim.cli.replay",
    "specsim.cli.sweep",
    "specsim.cli.capacity",
    "specsim.cli.fleet",
    "specsim.cli.schedule",
    "specsim.cli.tune",
)


# The modules a command line that names each command imports (in COMMAND_MODULES' order): the
# one that adds the command, those that add actions to its group and the groups' makers. Any
# other command line (``specsim --help``, a typo) imports them all. A command's start then skips
# the other commands' imports (the demo's tune, the sweeps, the live calibration: 0.05-0.1 s;
# tests/cli/test_cli_core.py checks this against what each module registers).
COMMAND_WORDS = {
    "demo": ("specsim.cli.demo",),
    "table": ("specsim.cli.table", "specsim.cli.model", "specsim.cli.bench", "specsim.cli.replay"),
    "calib": ("specsim.cli.calib",),
    "plan": ("specsim.cli.plan",),
    "tree": ("specsim.cli.tree",),
    "bench": ("specsim.cli.table", "specsim.cli.bench"),
    "trace": ("specsim.cli.trace",),
    "simulate": ("specsim.cli.simulate",),
    "replay": ("specsim.cli.table", "specsim.cli.replay"),
    "sweep": ("specsim.cli.sweep",),
    "capacity": ("specsim.cli.capacity",),
    "fleet": ("specsim.cli.fleet",),
    "schedule": ("specsim.cli.schedule",),
    "tune": ("specsim.cli.tune",),
}


class Parser(argparse.ArgumentParser):
    """argparse's parser (its sub-commands' too), with the fix for the likeliest slip it reports
    bare: an option whose value starts with a minus (``--edges -4,-2,0``) reads as "expected one
    argument", since argparse takes ``-4,-2,0`` for an option."""

    def error(self, message):
        m = re.match(r"argument (--[\w-]+)(?:/-\w)?: expected one argument$", message)
        if m:
            opt = m.group(1)
            argv = ARGV[-1] if ARGV else sys.argv[1:]
            after = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == opt and str(argv[i + 1]).startswith("-")]
            value = after[0] if after else "-4,-2,0"
            message += f"; a value that starts with a minus goes after '=': write {opt}={value}"
        super().error(message)


# The arguments being parsed (argparse's error() is not told them).
ARGV = []


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or where ``argv`` (the arguments to parse)
    names one, that command's (:data:`COMMAND_WORDS`)."""
    words = [str(a) for a in argv or () if not str(a).startswith("-")][:1]
    modules = COMMAND_WORDS.get(words[0], COMMAND_MODULES) if words else COMMAND_MODULES
    parser = Parser(
        prog="specsim",
        description="Plan, simulate and measure the cost of speculative decoding in LLM serving.",
    )
    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    groups = {}
    for name in modules:
        importlib.import_module(name).register(sub, groups)
    _summarise_groups(sub, groups)
    return parser


# Groups whose one-line summary in ``specsim --help`` is built from their actions (several
# modules add actions to them), and what those actions act on.
GROUP_NOUNS = {"table": "cost tables", "calib": "acceptance calibrations"}


def _summarise_groups(sub, groups) -> None:
    """Each group's summary names every action in it, whichever module added them."""
    for group, noun in GROUP_NOUNS.items():
        if group not in groups:  # a parser for one command (build_parser)
            continue
        names = list(groups[group].choices)
        summary = f"{', '.join(names[:-1])} and {names[-1]} {noun}"
        for choice in sub._choices_actions:
            if choice.dest == group:
                choice.help = summary
        sub.choices[group].description = summary[0].upper() + summary[1:] + "."


def main(argv=None) -> int:
    """Run the command line; returns the exit code (2 for any refused input, 130 on Ctrl-C)."""
    with _watching_interrupts() as seen:
        try:
            return _main(argv)
        except KeyboardInterrupt:
            # Also while the parser is built and the command modules imported: no traceback.
            pass
        except Exception:
            if not seen:
                raise
            # A Ctrl-C that landed in a callback from C (a kernel's first compile calls back from
            # LLVM) is swallowed there, and the compile then fails on its own: the interrupt it was.
        print("specsim: interrupted", file=sys.stderr)
        return 130


class _watching_interrupts:
    """While a command runs, note every Ctrl-C. One raised where it cannot propagate (inside a
    callback from C, which reports it as an "Exception ignored" and carries on) is not reported
    but raised again at the main thread's next instruction, and noted, so the command can tell
    that a failure before then (the compile that lost its callback's work) is the interrupt's."""

    def __enter__(self) -> list:
        self.seen = []
        self.pending = []
        self.active = True
        self.signal = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            def interrupted(signum, frame):
                self.seen.append(True)
                raise KeyboardInterrupt

            self.signal = signal.signal(signal.SIGINT, interrupted)
        self.hook = sys.unraisablehook

        def unraisable(what):
            if isinstance(what.exc_value, KeyboardInterrupt):
                # Raised again where it can propagate: from another thread, a moment later, so
                # the main thread takes it once out of this hook (in another callback: here again).
                self.seen.append(True)
                again = threading.Thread(target=self._again, daemon=True)
                self.pending.append(again)
                again.start()
            else:
                self.hook(what)

        sys.unraisablehook = unraisable
        return self.seen

    def _again(self) -> None:
        time.sleep(0.001)
        if self.active:
            _thread.interrupt_main()

    def __exit__(self, *exc) -> bool:
        self.active = False
        try:
            for again in self.pending:
                again.join()
        except KeyboardInterrupt:
            pass  # the interrupt raised again, after the command ended on it
        sys.unraisablehook = self.hook
        if self.signal is not None:
            signal.signal(signal.SIGINT, self.signal)
        return False


def _main(argv) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    # A process's arguments cannot hold NUL (a shell never passes one); one given through this
    # function would reach the file system calls, which refuse it with a bare ValueError.
    bad = [a for a in (argv or []) if "\x00" in str(a)]
    if bad:
        print(f"specsim: error: argument {bad[0]!r} holds a NUL character", file=sys.stderr)
        return 2
    ARGV.append(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    finally:
        ARGV.pop()
    stdout = sys.stdout
    sys.stdout = _Printable(stdout)
    try:
        return int(args.func(args) or 0)
    except SpecsimError as e:
        print(f"specsim: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``| head``): not an error; keep the interpreter's final flush quiet.
        _quiet_stdout()
        return 0
    except OSError as e:
        # A file we were told to write or read could not be: name it, no traceback.
        where = f"{clip(e.filename)}: " if getattr(e, "filename", None) else ""
        print(f"specsim: error: {where}{clip(e.strerror or e)}", file=sys.stderr)
        return 2
    finally:
        if isinstance(sys.stdout, _Printable):
            sys.stdout = stdout


class _Printable:
    """The commands' stdout with control characters escaped (:func:`specsim.errors.printable`):
    a name a user gave (a file, a policy, a label) printed in a report cannot rewrite the
    terminal. Line breaks and tabs pass; everything else is the stream underneath."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, text):
        return self._raw.write(printable(text, newlines=True))

    def __getattr__(self, name):
        return getattr(self._raw, name)


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def run() -> None:
    """The ``specsim`` console script: :func:`main` on the process's arguments, after the
    first-use notice when the command's kernels are still to be compiled."""
    try:
        announce(sys.argv[1:])
        code = main()
    except KeyboardInterrupt:  # Ctrl-C after the command's work, before the exit
        code = 130
    # The work is done and its files are in place: a Ctrl-C during the interpreter's shutdown
    # would otherwise kill the process by the signal, with a traceback or no exit code of ours.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _leave(code)


def _leave(code: int) -> None:
    """Exit with ``code``. Threads still running here are work the command abandoned (a Ctrl-C or
    an error while a pool's threads compile or simulate: a kernel's compile is seconds inside
    LLVM); the interpreter's exit would wait for each of them, so the exit handlers run here
    and the process ends without that wait. Every file the command writes is complete or
    removed before this point (docs/limits.md#outputs-and-ctrl-c)."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    # The interpreter's shutdown walks every object the collector tracks (Numba's type system and
    # the command modules: hundreds of thousands): 0.2-0.35 s of a 2 s ``simulate``, measured. The
    # objects left are the process's to the end; freezing them skips that walk, and the exit
    # handlers and the streams' flush still run.
    gc.freeze()
    sys.exit(code)
