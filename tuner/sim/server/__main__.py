"""``python -m tuner.sim.server``: the vLLM-compatible fake server."""

import sys

from tuner.sim.server.run import main

sys.exit(main())
