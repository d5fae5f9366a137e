"""Serving engines' speculative-decoding telemetry in, as calibration counts
(``docs/telemetry.md``).

:func:`read_telemetry` reads files of one format (named, or detected from the content) into
records in serve order; :func:`identify` turns them into what the source identifies: a step
histogram (accept-run histograms, per-step arrays, per-position counts at a fixed depth), or a
mean only, which fits a calibration only under a named assumption.
"""

from __future__ import annotations

from pathlib import Path

from specsim.calibration.telemetry._records import Record, Tally, read_text
from specsim.calibration.telemetry.identify import ASSUMPTIONS, Identified, identify, render_windows
from specsim.errors import CalibrationError

FORMATS = {
    "vllm-log": "vLLM `SpecDecoding metrics:` / V0 `Speculative metrics:` log lines",
    "vllm-prometheus": "vLLM /metrics text exposition (one scrape, or several: their difference)",
    "vllm-bench": "`vllm bench serve` summary (Speculative Decoding block) or --save-result JSON",
    "vllm-request": "vLLM per-request `speculative_decoding` metrics (JSON or JSON Lines)",
    "sglang-log": "SGLang `Decode batch` log lines",
    "sglang-request": "SGLang per-request `meta_info` (JSON or JSON Lines)",
    "sglang-server-info": "SGLang /server_info JSON",
    "trtllm-iteration": "TensorRT-LLM per-iteration `specDecodingStats` (JSON or JSON Lines)",
    "trtllm-request": "TensorRT-LLM per-request `speculative_decoding` blocks (JSON or JSON Lines)",
}

# Content markers, most specific first: the first format whose marker a file holds.
_MARKERS = (
    ("vllm-prometheus", ("vllm:spec_decode_",)),
    ("vllm-log", ("SpecDecoding metrics:", "Speculative metrics:")),
    ("vllm-bench", ("Speculative Decoding", "spec_decode_per_position_acceptance_rates")),
    ("sglang-log", ("Decode batch",)),
    ("trtllm-iteration", ("specDecodingStats", "spec_decoding_stats")),
    ("trtllm-request", ("total_accepted_draft_tokens",)),
    ("vllm-request", ("num_spec_steps", "acceptance_histogram", "\"speculative_decoding\"")),
    ("sglang-server-info", ("internal_states",)),
    ("sglang-request", ("spec_verify_ct", "spec_accept", "spec_num_correct_drafts", "spec_correct_drafts",
                        "spec_accepted_drafts")),
)


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
    from specsim.calibration.telemetry import sglang, trtllm, vllm

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
    parsers = {
        "vllm-log": vllm.parse_log, "vllm-bench": vllm.parse_bench, "vllm-request": vllm.request_records,
        "sglang-log": lambda text, source: sglang.parse_log(text, source, decode_log_interval or sglang.DECODE_LOG_INTERVAL), "sglang-request": sglang.parse_requests,
        "sglang-server-info": sglang.parse_server_info, "trtllm-iteration": trtllm.parse_iterations,
        "trtllm-request": trtllm.parse_requests,
    }
    tally = Tally()
    if fmt == "vllm-prometheus":
        records, tally = vllm.parse_prometheus([t for t, _ in texts], [Path(n).name for n in names])
    else:
        records = []
        for (text, _), name in zip(texts, names):
            recs, t = parsers[fmt](text, Path(name).name)
            records += recs
            tally.merge(t)
    tally.records = len(records)
    if strict and tally.garbage:
        raise CalibrationError(f"--strict: {tally.garbage} lines or blocks look like {fmt} but cannot be read",
                               tally.problems[:12] + ([f"... and {tally.garbage - 12} more"] if tally.garbage > 12 else []))
    return fmt, records, tally


__all__ = ["ASSUMPTIONS", "FORMATS", "Identified", "Record", "Tally", "detect_format", "identify", "read_telemetry",
           "render_windows"]
