"""Fleets: replicas of the serving engine behind a router (docs/fleets.md).

:mod:`~specsim.sim.fleet.fleet` reads a fleet and simulates it, :mod:`~specsim.sim.fleet._kernels`
steps every replica with the single-server step, :mod:`~specsim.sim.fleet.result` holds what it did.
"""

from specsim.sim.fleet.fleet import (
    DEFAULT_FLEET_ROUTER, FLEET_LOG_ENTRIES, MAX_REPLICAS, ROUTERS, Fleet, FleetError, ReplicaGroup, check_router,
    load_fleet, parse_fleet, simulate_fleet, table_gpus,
)
from specsim.sim.fleet.result import FleetResult

__all__ = ["DEFAULT_FLEET_ROUTER", "FLEET_LOG_ENTRIES", "MAX_REPLICAS", "ROUTERS", "Fleet", "FleetError", "FleetResult",
           "ReplicaGroup", "check_router", "load_fleet", "parse_fleet", "simulate_fleet", "table_gpus"]
