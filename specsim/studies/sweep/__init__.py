"""Sweeps: many what-if simulations over a grid, on a Dask cluster or serially (docs/formats.md#sweep-grid)."""

from specsim.studies.sweep.grid import Grid, GridError, load_grid, parse_grid, point_id
from specsim.studies.sweep.run import SweepReport, read_results, run_point, run_sweep

__all__ = ["Grid", "GridError", "SweepReport", "load_grid", "parse_grid", "point_id", "read_results", "run_point",
           "run_sweep"]
