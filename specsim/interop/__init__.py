"""The real serving engines, one module each (:mod:`~specsim.interop.vllm`,
:mod:`~specsim.interop.sglang`, :mod:`~specsim.interop.trtllm`): what they print and export about
speculative decoding (``docs/telemetry.md``), and the settings they read.

This registry names every telemetry format (:data:`TELEMETRY`), tells a file's format from its
content (:func:`detect_format`) and reads files of one format into records in serve order
(:func:`read_telemetry`); :func:`specsim.calibration.telemetry.identify` turns records into what
they identify.
"""

from __future__ import annotations

from pathlib import Path

from specsim.errors import CalibrationError
from specsim.interop import sglang, trtllm, vllm
from specsim.interop._records import Format, Record, Tally, read_text

ENGINES = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm}
"""The engines specsim knows, each one module holding its telemetry readers and its formats."""

TELEMETRY = {f.name: f for module in ENGINES.values() for f in module.TELEMETRY}
"""Every telemetry format by name (``--from``)."""

FORMATS = {name: f.description for name, f in TELEMETRY.items()}

# Detection tries formats in this order, most specific marker first: the first format whose
# marker a file holds.
_DETECT_ORDER = ("vllm-prometheus", "vllm-log", "vllm-bench", "sglang-log", "trtllm-iteration", "trtllm-request",
                 "vllm-request", "sglang-server-info", "sglang-request")
_MARKERS = tuple((name, TELEMETRY[name].markers) for name in _DETECT_ORDER)


def detect_format(text: str, source: str = "<text>") -> str:
    """The telemetry format of a file's text, told from markers each format always carries."""
    if "sglang:spec_accept" in text and "Decode batch" not in text:
        raise CalibrationError(
            f"{source}: SGLang's sglang:spec_accept_length / spec_accept_rate are gauges reset every log interval, "
            "so a scrape holds one interval's mean and loses the rest; import the `Decode batch` log lines or the "
            "per-request meta_info instead")
    for name, markers in _MARKERS:
        if any(m in text for m in markers):
            return name
    raise CalibrationError(
        f"{source}: no speculative-decoding telemetry recognised (none of the formats' markers, e.g. "
        "`SpecDecoding metrics:`, `vllm:spec_decode_`, `Decode batch`, `specDecodingStats`, appears); "
        f"name the format with --from ({', '.join(FORMATS)})"
    )


def read_telemetry(paths, fmt=None, strict: bool = False, decode_log_interval=None):
    """Read telemetry files of one format into records in serve order.

    Parameters
    ----------
    paths : sequence of path
        Files in the order they were written (scrapes: earliest first).
    fmt : str, optional
        One of :data:`FORMATS`; detected from each file's content when None (all must agree).
    strict : bool
        Refuse any line or block that looks like the format but cannot be read (listing them),
        instead of skipping and counting it.
    decode_log_interval : int, optional
        SGLang's ``--decode-log-interval`` the serve ran (decode steps per ``Decode batch``
        line; default 40).

    Returns
    -------
    (str, list of Record, Tally)
        The format, the records and what was read.
    """
    if fmt is not None and fmt not in FORMATS:
        raise CalibrationError(f"unknown telemetry format {fmt!r}: one of {', '.join(FORMATS)}")
    texts, names = [], []
    for p in paths:
        text = read_text(p)
        found = fmt or detect_format(text, str(p))
        if fmt is None and names and found != texts[0][1]:
            raise CalibrationError(f"{p} looks like {found} but {names[0]} like {texts[0][1]}: import one format at a "
                                   "time (or name it with --from)")
        texts.append((text, found))
        names.append(str(p))
    fmt = fmt or texts[0][1]
    if decode_log_interval is not None and decode_log_interval < 1:
        raise CalibrationError(f"--decode-log-interval {decode_log_interval}: SGLang logs every N >= 1 decode steps")
    options = {"decode_log_interval": decode_log_interval or sglang.DECODE_LOG_INTERVAL}
    reader = TELEMETRY[fmt]
    kw = {k: options[k] for k in reader.options}
    if reader.whole:  # one reading of every file together (scrapes: their differences)
        records, tally = reader.parse([t for t, _ in texts], [Path(n).name for n in names], **kw)
    else:
        records, tally = [], Tally()
        for (text, _), name in zip(texts, names):
            recs, t = reader.parse(text, Path(name).name, **kw)
            records += recs
            tally.merge(t)
    tally.records = len(records)
    if strict and tally.garbage:
        raise CalibrationError(f"--strict: {tally.garbage} lines or blocks look like {fmt} but cannot be read",
                               tally.problems[:12] + ([f"... and {tally.garbage - 12} more"] if tally.garbage > 12 else []))
    return fmt, records, tally


__all__ = ["ENGINES", "FORMATS", "TELEMETRY", "Format", "Record", "Tally", "detect_format", "read_telemetry"]
