"""File helpers: inputs read with guards, outputs checked before the work and written
all-or-nothing after it, so a failed or interrupted command never leaves a damaged file."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

from specsim.errors import OutputError
from specsim._checks import MAX_INPUT_BYTES, MAX_JSON_DEPTH, show


# The longest file name (one path component) common file systems take, in bytes.
MAX_NAME_BYTES = 255


def read_input(path, what: str, error_cls) -> bytes:
    """The bytes of an input file, or ``error_cls`` naming the file, what it should be and why
    it could not be read (missing, a folder, a device, a pipe nothing writes to, no permission,
    past the size limit)."""
    with open_input(path, what, error_cls) as f:
        try:
            data = f.read(MAX_INPUT_BYTES + 1)
        except OSError as e:
            raise error_cls(f"{path}: cannot read {what} ({e.strerror or e})") from e
    if len(data) > MAX_INPUT_BYTES:
        raise error_cls(_too_big(path, what))
    return data


def _too_big(path, what: str) -> str:
    return f"{path}: {what} is larger than {MAX_INPUT_BYTES:,} bytes, the most specsim reads (docs/limits.md)"


# How long a named pipe's first bytes (or its end) may take to show before it is taken as a pipe
# nothing writes to: a writer that opened it before us has always written by then.
PIPE_WAIT_S = 0.5


def open_input(path, what: str, error_cls):
    """The guarded opener every reader goes through: a binary file object of the input ``path``.

    Refused with ``error_cls``, naming the file: a name that is not a str or path or holds a NUL,
    a folder, a device (``/dev/zero`` never ends) or a socket, a regular file past the size limit,
    and a named pipe (FIFO) nothing writes to, which would block a plain ``open`` for ever. It is
    opened without blocking; a pipe that is being written (``/dev/stdin`` fed by another command)
    is read, up to the size limit, and handed back from memory."""
    if not isinstance(path, (str, os.PathLike)):
        raise error_cls(f"{what}: a file name (str or path) is needed, got {type(path).__name__}")
    if "\x00" in str(path):
        raise error_cls(f"{str(path)!r}: a file name cannot hold a NUL character")
    path = Path(path)
    if path.is_dir():
        raise error_cls(f"{path}: is a folder, not {what}; give a file")
    refuse_device(path, what, error_cls)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error_cls(f"{path}: cannot read {what} ({e.strerror or e})") from e
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
            raise error_cls(f"{path}: is a device, not {what}; give a file")
        if stat.S_ISREG(mode):
            if os.fstat(fd).st_size > MAX_INPUT_BYTES:
                raise error_cls(_too_big(path, what))
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        if not stat.S_ISFIFO(mode):
            raise error_cls(f"{path}: is not a regular file, not {what}; give a file")
        chunks, size, deadline, started = [], 0, time.monotonic() + PIPE_WAIT_S, False
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                # A writer holds the pipe: from here on its data (or its end) is waited for.
                started = True
                os.set_blocking(fd, True)
                continue
            if chunk:
                started = True
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_INPUT_BYTES:
                    raise error_cls(_too_big(path, what))
                continue
            if started or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not started:
            raise error_cls(f"{path}: is a named pipe (FIFO) that nothing writes to, not {what}; give a file")
        return io.BytesIO(b"".join(chunks))
    except BaseException:
        os.close(fd)
        raise


def refuse_device(path, what: str, error_cls) -> None:
    """Refuse ``path`` when it is a device (``/dev/zero``, ``/dev/urandom``, a terminal) or a
    socket: reading one never ends, so a reader would hang or fill the memory. Pipes pass, for
    :func:`open_input` to read without blocking; a missing file passes too, for the reader to name."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise error_cls(f"{path}: is a device, not {what}; give a file")


@contextlib.contextmanager
def _naming(target: Path):
    """An OS error while writing ``target`` through a temporary file names ``target``: the
    temporary file is ours, not a name the user gave."""
    try:
        yield
    except OSError as e:
        if e.filename is None or Path(os.fsdecode(e.filename)).name.startswith(_temp_prefix(target)):
            raise type(e)(e.errno, e.strerror or str(e), str(target)) from None
        raise


def _mkstemp(target: Path, suffix: str = ".tmp"):
    """``tempfile.mkstemp`` beside ``target``, an error naming ``target``."""
    with _naming(target):
        return tempfile.mkstemp(prefix=_temp_prefix(target), suffix=suffix, dir=target.parent)


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "is a folder; give a file name", str(path))
    tmp = _temp_with(path, data)
    try:
        with _naming(path):
            # mkstemp makes the file private (0600); give it the mode a plain open() would.
            os.chmod(tmp, _mode_for(path))
            os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    return path


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


# -- outputs: checked before any work, written all together at the end ------------------------

def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same path after following symlinks, or
    two names (hard links) of one existing file."""
    a, b = Path(a), Path(b)
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Outputs:
    """Every file a command writes, checked before any work and replaced together at the end.

    A command names its inputs and declares each output up front; :meth:`declare` refuses (with
    :class:`~specsim.errors.OutputError`, exit code 2) an output that is a folder, that sits where
    nothing can be written, that is one of the inputs (after symlinks, or a hard link), or that
    is declared twice. The work then stages each output's content (:meth:`text`, :meth:`bytes`,
    or :meth:`path` for writers that need a file name, such as matplotlib); leaving the ``with``
    block without an error writes every staged file to a temporary file beside its target and
    only then renames them all into place, so a command that fails, or is interrupted, leaves
    every earlier file as it was.

    Examples
    --------
    >>> with Outputs(inputs={"--table": args.table}) as out:      # doctest: +SKIP
    ...     out.declare(args.json, "--json")
    ...     out.declare(args.plot, "--plot")
    ...     result = work()                                         # no file written yet
    ...     out.text(args.json, render(result))
    ...     draw(result, out.path(args.plot))                       # a temporary name
    ...                                                             # both renamed here

    Not safe to share between threads: one command, one ``Outputs``.
    """

    def __init__(self, inputs=None):
        """``inputs``: ``{label: path}`` or a list of ``(label, path)`` (``None`` paths skipped)."""
        self._error = OutputError
        self._inputs = [(label, p) for label, p in _pairs(inputs) if p is not None]
        self._declared = {}   # realpath -> (label, path as given)
        self._staged = {}     # realpath -> bytes, or the Path of a temporary file already written
        self.written = []     # paths as given, after commit

    # -- before the work
    def add_input(self, path, label: str) -> None:
        """Name one more input (no output may replace it)."""
        if path is not None:
            self._inputs.append((label, path))
            for real, (olabel, opath) in self._declared.items():
                if same_file(real, path):
                    raise self._error(f"{olabel} {opath} is also the input {label} {path}: "
                                      "writing it would destroy the input; give another output name")

    def declare(self, path, label: str):
        """Check one output now; returns ``path`` (``None`` passes through: an option not given)."""
        if path is None:
            return None
        given = str(path)
        if not given.strip():
            raise self._error(f"{label}: the output file name is empty")
        if "\x00" in given:
            raise self._error(f"{label} {given!r}: a file name cannot hold a NUL character")
        p = Path(given)
        if len(os.fsencode(p.name)) > MAX_NAME_BYTES:
            raise self._error(f"{label} {show(given)}: the file name is {len(os.fsencode(p.name)):,} bytes long; "
                              f"file systems take at most {MAX_NAME_BYTES}")
        if p.is_dir() or given.endswith(("/", os.sep)):
            # "out/" names a folder even before it exists: Path() would drop the slash and
            # write a file called "out".
            raise self._error(f"{label} {given}: is a folder; give a file name")
        if p.exists() and not p.is_file():
            raise self._error(f"{label} {given}: is not a regular file (a device or a pipe); give a file name")
        real = os.path.realpath(p)
        folder = _nearest_existing(Path(real).parent)
        if not folder.is_dir():
            raise self._error(f"{label} {given}: {folder} is a file, not a folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise self._error(f"{label} {given}: cannot write in the folder {folder} (no permission)")
        problem = _write_problem(folder)
        if problem:
            raise self._error(f"{label} {given}: cannot write in the folder {folder} ({problem})")
        for ilabel, ipath in self._inputs:
            if same_file(p, ipath):
                raise self._error(f"{label} {given} is also the input {ilabel} {ipath}: writing it would "
                                  "destroy the input; give another output name")
        if real in self._declared:
            olabel, _ = self._declared[real]
            raise self._error(f"{label} {given} is also the output {olabel}: give each output its own name")
        self._declared[real] = (label, given)
        return path

    # -- during the work
    def _key(self, path) -> str:
        real = os.path.realpath(path)
        if real not in self._declared:
            raise RuntimeError(f"output {path} was not declared before the work")  # a bug, not a user error
        return real

    def bytes(self, path, data: bytes) -> None:
        """Stage ``data`` as the content of the declared output ``path``."""
        self._drop(self._key(path))
        self._staged[self._key(path)] = bytes(data)

    def text(self, path, text: str) -> None:
        """Stage UTF-8 ``text`` as the content of the declared output ``path``."""
        self.bytes(path, text.encode("utf-8"))

    def path(self, path) -> Path:
        """A temporary file name, with ``path``'s extension, in ``path``'s folder, for a writer
        that needs a name; it replaces ``path`` at commit."""
        real = self._key(path)
        self._drop(real)
        target = Path(real)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Writers that pick a format from the extension (matplotlib) see the target's; a name
        # without one gets PNG's, the format the plot writers use then.
        fd, tmp = _mkstemp(target, f".tmp{target.suffix[:16] or '.png'}")
        os.close(fd)
        self._staged[real] = Path(tmp)
        return Path(tmp)

    # -- after the work
    def commit(self) -> list:
        """Write every staged output: all to temporary files first, then all renamed into place."""
        temps = {}
        try:
            for real, content in self._staged.items():
                if isinstance(content, Path):
                    if not content.exists() or content.stat().st_size == 0:
                        raise self._error(f"{self._declared[real][0]} {self._declared[real][1]}: "
                                          "nothing was written")
                    temps[real] = content
                else:
                    temps[real] = _temp_with(Path(real), content)
            for real, tmp in temps.items():
                with _naming(Path(real)):
                    os.chmod(tmp, _mode_for(Path(real)))
            with no_interrupt():
                # All renames or none: a Ctrl-C here is held until the last one is done.
                for real, tmp in temps.items():
                    with _naming(Path(real)):
                        os.replace(tmp, real)
                    self.written.append(self._declared[real][1])
        finally:
            for tmp in temps.values():
                _unlink(tmp)
            self.discard()
        return list(self.written)

    def discard(self) -> None:
        """Forget what was staged; temporary files are removed, no output is touched."""
        for content in self._staged.values():
            if isinstance(content, Path):
                _unlink(content)
        self._staged.clear()

    def _drop(self, real):
        old = self._staged.pop(real, None)
        if isinstance(old, Path):
            _unlink(old)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False


@contextlib.contextmanager
def no_interrupt():
    """Hold a Ctrl-C back for the block (in the main thread) and raise it right after: the block
    runs to its end. The signal may reach any thread of the process, so the handler is swapped
    for one that notes it, rather than the signal blocked in this thread alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    previous = signal.signal(signal.SIGINT, lambda *args: held.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held and callable(previous):
        previous(*held[0])  # Python's handler (or the command's) raises KeyboardInterrupt


def _pairs(inputs):
    if inputs is None:
        return []
    if isinstance(inputs, dict):
        return list(inputs.items())
    return [p if isinstance(p, tuple) else ("the input", p) for p in inputs]


def _write_problem(folder: Path):
    """Why no file can be made in ``folder`` (a file made and removed there, before any work: a
    permission check alone passes for root in /proc or on a read-only mount), or None."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".specsim-check.", suffix=".tmp", dir=folder)
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    _unlink(tmp)
    return None


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _temp_with(target: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``target`` (its folder made first)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(target)
    try:
        with _naming(target), os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return Path(tmp)


def _temp_prefix(target: Path) -> str:
    """A temporary file's name prefix: the target's name, cut so that the whole temporary name
    stays within the 255 bytes a file name may have even when the target's name is that long."""
    name = target.name
    while len(os.fsencode(name)) > 100:
        name = name[:-1]
    return f".{name}."


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- side files: JSON and CSV read with the TOML readers' guarantees ---------------------------

def decode_text(data: bytes, what: str, source, error_cls) -> str:
    """UTF-8 text of a side file, a UTF-8 byte-order mark dropped; binary content, UTF-16/32
    and bytes that are not UTF-8 refused naming ``source`` and the byte offset."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error_cls(f"{source}: {what} is UTF-16 (or UTF-32) text; save it as UTF-8")
    nul = data.find(b"\x00", 0, 1 << 20)
    if nul >= 0:
        raise error_cls(f"{source}: {what} holds a NUL byte at offset {nul}: a binary file, not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error_cls(f"{source}: {what} is not UTF-8 text (byte {e.start} is {data[e.start:e.start + 1]!r})") from None
    return text.removeprefix("\ufeff")


class _JSONRefused(ValueError):
    pass


class DuplicateKeyError(_JSONRefused):
    """A JSON object that names one key twice (Python's reader keeps the last value, others the
    first: which one a file means is unknown)."""


def json_object(pairs):
    """The ``object_pairs_hook`` of every JSON reader: the object as a dict, or
    :class:`DuplicateKeyError` when a key appears twice in it."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise DuplicateKeyError(f"the key {show(dup)} appears twice in one object: give it once (which value is "
                                "meant is unknown)")
    return obj


def _json_int(literal: str) -> int:
    # Checked as text first: Python refuses to convert integers past 4,300 digits at all.
    if len(literal.lstrip("-")) > 19 or not -(1 << 63) <= int(literal) < (1 << 63):
        raise _JSONRefused(f"the integer {literal[:30]}{'…' if len(literal) > 30 else ''} is outside the "
                           "64-bit signed range")
    return int(literal)


def _json_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _JSONRefused(f"the number {literal[:30]} is beyond the largest 64-bit float")
    return value


def _json_constant(name: str):
    raise _JSONRefused(f"{name} is not JSON (JSON has no infinities or NaN; use null)")


def loads_json(text, what: str, source, error_cls, max_depth: int | None = None):
    """Parse one JSON document with the TOML readers' guarantees: integers within 64 bits,
    finite floats, no ``NaN``/``Infinity``, nesting at most ``max_depth`` deep; any refusal
    raises ``error_cls`` naming ``source`` and, for syntax errors, the line and column."""
    if isinstance(text, bytes):
        text = decode_text(text, what, source, error_cls)
    text = text.removeprefix("\ufeff")
    max_depth = MAX_JSON_DEPTH if max_depth is None else max_depth
    depth = _bracket_depth(text)
    if depth > max_depth:
        raise error_cls(f"{source}: {what} nests lists or objects {depth} deep; at most {max_depth} "
                        "(docs/limits.md)")
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant,
                          object_pairs_hook=json_object)
    except _JSONRefused as e:
        raise error_cls(f"{source}: {what}: {e}") from None
    except json.JSONDecodeError as e:
        raise error_cls(f"{source}: {what} is not JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise error_cls(f"{source}: {what} nests too deep to read") from None


def _bracket_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings (a cheap pass before the parser,
    which would otherwise recurse once per level)."""
    if "[" not in text and "{" not in text:
        return 0
    # Strings cannot hide brackets from the count: drop them first.
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", stripped):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def read_json(path, what: str, error_cls, max_depth: int | None = None):
    """Read and parse a JSON side file (see :func:`loads_json`); a folder, a missing file or
    an unreadable one is refused naming it."""
    return loads_json(read_input(path, what, error_cls), what, path, error_cls, max_depth)


def csv_rows(text: str, what: str, source, error_cls):
    """``(header, [(line, row), ...])`` of CSV text (already decoded by :func:`decode_text`):
    the header's fields stripped, rows as lists of strings; a field longer than the CSV
    module's limit or a broken quote is refused naming the line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as e:
        raise error_cls(f"{source}:{reader.line_num}: {what} is not CSV ({e})") from None
    if header is not None:
        header = [h.strip() for h in header]
    return header, rows
