"""``python -m tuner.sim.server``: the vLLM-compatible fake server."""

import sys

from tuner.sim.server.app import main

sys.exit(main())
