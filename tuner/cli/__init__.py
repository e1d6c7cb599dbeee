"""The ``spectune`` command line: thin typer commands that parse, call one library function,
and render. Each module registers its commands on the shared app when imported."""

from tuner.cli import bench_commands as _bench_commands  # noqa: F401  (registers commands)
from tuner.cli import calibrate_commands as _calibrate_commands  # noqa: F401  (registers commands)
from tuner.cli import catalog_commands as _catalog_commands  # noqa: F401  (registers commands)
from tuner.cli import estimate_commands as _estimate_commands  # noqa: F401  (registers commands)
from tuner.cli import prefetch_commands as _prefetch_commands  # noqa: F401  (registers commands)
from tuner.cli import result_commands as _result_commands  # noqa: F401  (registers commands)
from tuner.cli import space_commands as _space_commands  # noqa: F401  (registers commands)
from tuner.cli import studies_commands as _studies_commands  # noqa: F401  (registers commands)
from tuner.cli import study_commands as _study_commands  # noqa: F401  (registers commands)
from tuner.cli import worker_commands as _worker_commands  # noqa: F401  (registers commands)
from tuner.cli.app import app

__all__ = ["app"]
