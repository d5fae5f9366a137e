"""The SLO flags (``--slo-ttft-s``, ``--slo-tpot-s``, ``--attainment``): one flag group for every
command that reads an SLO (simulate, fleet, capacity, tune), and the :class:`~specsim.sim.slo.SLO`
they make."""

from __future__ import annotations

from specsim.cli._common import nonneg_float, real
from specsim.errors import SimulationError
from specsim.sim.slo import FLAG_NAMES, SLO, slo_problem


def add_slo_options(p, *, targets: str = "for SLO attainment", attainment: str = None, metavar: str = "F",
                    default=None) -> None:
    """Add the latency targets to parser ``p`` (help: "TTFT target ``targets``") and, when
    ``attainment`` (its help) is given, ``--attainment`` with ``default``."""
    p.add_argument("--slo-ttft-s", type=nonneg_float, metavar="S", help=f"TTFT target {targets}".rstrip())
    p.add_argument("--slo-tpot-s", type=nonneg_float, metavar="S", help=f"TPOT target {targets}".rstrip())
    if attainment is not None:
        p.add_argument("--attainment", type=real, default=default, metavar=metavar, help=attainment)


def slo_from_args(args, error=SimulationError) -> SLO:
    """The :class:`SLO` of the flags, refused (as ``error``, naming the flags) when a value is bad."""
    attainment = getattr(args, "attainment", None)
    problem = slo_problem(args.slo_ttft_s, args.slo_tpot_s, attainment, FLAG_NAMES)
    if problem:
        raise error(problem)
    return SLO(args.slo_ttft_s, args.slo_tpot_s, attainment)
