"""A worker process for benchmarks/engine_vs_old.py: run as a script with PYTHONPATH at one
checkout of specsim (this one or an older commit), it loads the trace, table and calibration
given on its command line with that checkout's own readers, then answers requests on stdin,
one JSON line each: ``{"policy": P, "options": {...}}`` -> ``{"cpu_s": best CPU seconds of
simulate over "rounds" calls, "tokens": emitted tokens, "end_s": simulated end}``.

It uses only the public API both old and new versions share (``specsim.read_trace``,
``CostTable.load``, ``AcceptanceCalibration.load``, ``specsim.simulate``), so it runs on either.
"""

import json
import sys
import time


def main():
    import specsim

    trace, table_path, cal_path = sys.argv[1:4]
    reqs = specsim.read_trace(trace).requests
    table = specsim.CostTable.load(table_path)
    cal = specsim.AcceptanceCalibration.load(cal_path)
    print(json.dumps({"ready": specsim.__file__}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        opts = ask.get("options", {})
        if ask.get("warm"):
            specsim.simulate(reqs[:200], table, cal, ask["policy"], **opts)
        best = float("inf")
        res = None
        for _ in range(ask.get("rounds", 1)):
            t0 = time.process_time()
            res = specsim.simulate(reqs, table, cal, ask["policy"], **opts)
            best = min(best, time.process_time() - t0)
        print(json.dumps({"cpu_s": best, "tokens": int(res.counters["emitted_tokens"]), "end_s": float(res.end_s)}),
              flush=True)


if __name__ == "__main__":
    main()
