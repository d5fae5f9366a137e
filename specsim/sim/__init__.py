"""Simulation: request traces, acceptance-trace replay, policies (SPEC §5-§6)."""
