"""Energy per token of ``load-aware`` against plain decoding, ``propose`` and the best fixed depth.

Run: ``pytest benchmarks/test_load_aware.py --benchmark-only -s`` (from the repository root; the
trace is in tests/data). The runs are ``benchmarks/load_aware.py``'s: the Azure 2023 conversation
hour at 0.5x, 1x and 2x its rate on the demo's table and calibration, with the demo's SLO, every
policy under three draft-outcome seeds. Recorded in ``extra_info`` per load: each policy's mean
J/token, its spread over those seeds, its SLO attainment, and load-aware's gap to the best of
plain decoding, ``propose`` and the best fixed depth (the figures in docs/simulation.md,
"Load-aware"). The printed table is the one the doc carries.
"""

from __future__ import annotations

from benchmarks import load_aware


def test_load_aware_energy_per_token(benchmark):
    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.sim import simulate
    from specsim.traces import read_trace

    simulate(read_trace(load_aware.CONV).requests[:50], demo_table(), demo_calibration(), "load-aware")  # compile
    results = []
    benchmark.pedantic(lambda: results.append(load_aware.figures()), rounds=1, iterations=1)
    for scale, figs in results[-1]:
        v = load_aware.verdict(figs)
        if v["rival_met"]:  # wherever a rival meets the SLO, load-aware does too
            assert v["load_aware_met"], (scale, figs["load-aware"])
        benchmark.extra_info[f"x{scale:g}"] = {p: {"j_per_token": f[0], "seed_sd": f[1], "attainment": f[2]}
                                               for p, f in figs.items()} | {"best": v["best"], "gap": v["gap"]}
    print("\n" + load_aware.HEADER)
    print("\n".join(load_aware.rows(results[-1])))
