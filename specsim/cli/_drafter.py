"""The drafter key flags: one flag group for every command that writes a calibration (``calib fit``,
``calib import``)."""

from __future__ import annotations

from specsim.calibration import DrafterKey
from specsim.calibration._types import what_if_key
from specsim.cli._common import count
from specsim.errors import CalibrationError
from specsim._checks import show


DRAFTER_FLAGS = ("--drafter-sha256", "--vocab", "--quantization", "--context")


def drafter_flags(p, what_if: bool = False):
    """The drafter key flags every command that writes a calibration takes; with ``what_if``,
    also ``--what-if`` (a synthetic key instead of them)."""
    need = " (required unless --what-if)" if what_if else ""
    p.add_argument("--drafter-sha256", required=not what_if,
                   help=f"sha256 over the drafter's tensors as loaded (64 hex digits){need}")
    p.add_argument("--vocab", required=not what_if, type=count, help=f"drafter vocabulary size{need}")
    p.add_argument("--quantization", required=not what_if, help=f"drafter quantization, e.g. bf16{need}")
    p.add_argument("--context", required=not what_if, choices=("true", "false"),
                   help=f"whether the drafter's prompt context was active{need}")
    if what_if:
        p.add_argument("--what-if", action="store_true",
                       help="no drafter's weights at hand: file the calibration under a clearly synthetic drafter "
                            "key (for simulating rates; refused where a served drafter's key is required)")


def drafter_key(args):
    """The :class:`DrafterKey` of :func:`drafter_flags`, refused when a field is empty."""
    given = [f for f in DRAFTER_FLAGS if getattr(args, f[2:].replace("-", "_")) is not None]
    if getattr(args, "what_if", False):
        if given:
            raise CalibrationError(f"--what-if files the calibration under a synthetic drafter key: leave out "
                                   f"{', '.join(given)} (or drop --what-if to name the real drafter)")
        return what_if_key()
    missing = [f for f in DRAFTER_FLAGS if f not in given]
    if missing:
        raise CalibrationError(f"give the drafter's key: {', '.join(missing)} (a calibration is used only with the "
                               "drafter it was fitted on), or --what-if with --rates for a what-if calibration")
    if args.vocab < 1:
        raise CalibrationError(f"--vocab {args.vocab}: give the drafter's vocabulary size (at least 1)")

    for flag, value in (("--drafter-sha256", args.drafter_sha256), ("--quantization", args.quantization)):
        if not value.strip():
            raise CalibrationError(f"{flag} is empty: a calibration is used only with the drafter it was fitted on, "
                                   "so its key must name it")
        if not value.isprintable() or value != value.strip():
            raise CalibrationError(f"{flag} {show(value)} holds a control character or surrounding spaces: give "
                                   "the value alone on one line")
    sha = args.drafter_sha256
    if len(sha) != 64 or any(ch not in "0123456789abcdefABCDEF" for ch in sha):
        raise CalibrationError(f"--drafter-sha256 {show(sha)} is not a SHA-256: give the 64 hex digits sha256sum "
                               "prints over the drafter's weights as loaded, so the calibration is used only with "
                               "that drafter")
    return DrafterKey(args.drafter_sha256, args.vocab, args.quantization, args.context == "true")
