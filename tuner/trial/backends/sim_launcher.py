"""The simulator as a launcher: "starts" a server config by checking it against GPU memory.

The memory model gets a small hidden overhead per config (seeded), like the fragmentation and
library workspaces that make a real start-up fail near the limit, so a config the pre-screen
accepts can still run out of memory here. A failure goes through the same classification as
real vLLM logs.
"""

from __future__ import annotations

import random

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import load_model
from tuner.config.trial import LaunchContext, ServerConfig, load_draft
from tuner.launch.failures import startup_failure
from tuner.results import Endpoint
from tuner.sim.memory import estimate_memory

__all__ = ["SIM_URL", "SimLauncher"]

SIM_URL = "sim://"
_MAX_JITTER_GIB = 0.5


class SimLauncher:
    """Launcher for ``--backend sim``: nothing runs; the engine measures in virtual time."""

    name = "sim"

    def __init__(self, hardware: Hardware, seed: int = 0) -> None:
        self.hardware = hardware
        self.seed = seed

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        target = load_model(server.model)
        draft = load_draft(server)
        jitter = random.Random(f"{self.seed}:{server!r}").uniform(0.0, _MAX_JITTER_GIB)
        memory = estimate_memory(self.hardware, target, draft, server, jitter_gib=jitter)
        if not memory.fits:
            log = (
                f"INFO [simulated] Loading weights took {memory.weights_gib:.2f} GiB per GPU\n"
                f"ERROR [simulated] {memory.reason}\n"
                "RuntimeError: Engine core initialization failed. See root cause above.\n"
            )
            raise startup_failure(1, log)
        return Endpoint(SIM_URL, server.served_model_name or server.model)

    def stop(self) -> None:
        """Nothing to stop: the simulated server holds no resources."""

    def close(self) -> None:
        """Nothing to release."""
