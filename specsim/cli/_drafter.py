"""The drafter key flags: one flag group for every command that writes a calibration (``calib fit``,
``calib import``)."""

from __future__ import annotations

from specsim.calibration import DrafterKey
from specsim.cli._common import count
from specsim.errors import CalibrationError
from specsim._checks import show


def drafter_flags(p):
    """The drafter key flags every command that writes a calibration takes."""
    p.add_argument("--drafter-sha256", required=True,
                   help="sha256 over the drafter's tensors as loaded (64 hex digits)")
    p.add_argument("--vocab", required=True, type=count, help="drafter vocabulary size")
    p.add_argument("--quantization", required=True, help="drafter quantization, e.g. bf16")
    p.add_argument("--context", required=True, choices=("true", "false"),
                   help="whether the drafter's prompt context was active")


def drafter_key(args):
    """The :class:`DrafterKey` of :func:`drafter_flags`, refused when a field is empty."""
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
