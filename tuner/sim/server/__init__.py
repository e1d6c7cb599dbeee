"""The vLLM-compatible fake server, started as ``python -m tuner.sim.server``."""
