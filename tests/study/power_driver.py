"""Runs a process-backend study on a stand-in GPU whose power limit outlives this process.

Usage: ``python power_driver.py SPEC_JSON`` with keys space (a space file), studies_dir, study,
trials, limit_file (the stand-in's limits, a file as a real GPU's limit is the driver's) and
allow (``--allow-power-limit``). Each notice the run gives is printed on its own line, then
DONE at the end. The CLI's own signal handling is installed, as ``spectune optimize`` has it.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from pathlib import Path

from tests.testbed.docker_host import FAKE_SERVER
from tests.testbed.gpus import FakeGpus
from tuner.config.space import load_space
from tuner.config.vllm_args import parse_version
from tuner.launch.exit_hooks import install_signal_handlers
from tuner.launch.process import ProcessLauncher
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.trial.backends import BackendOptions, ProcessSettings
from tuner.trial.backends.process import ProcessBackend


def main(spec: dict[str, object]) -> None:
    # Ctrl-C as a terminal delivers it: a test run in the background passes SIGINT on ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    install_signal_handlers()
    launcher = ProcessLauncher(
        FAKE_SERVER,
        version=parse_version("0.32.0"),
        env={"SPECTUNE_SIM_SPEED": "1", "SPECTUNE_GPU_TEST": uuid.uuid4().hex},
        ready_timeout_s=60,
        poll_s=0.05,
    )
    gpus = FakeGpus(limit_file=Path(str(spec["limit_file"])))
    backend = ProcessBackend(
        launcher, request_timeout_s=30, gpu_monitor=gpus, sample_interval_s=0.05
    )
    request = OptimizeRequest(
        study=str(spec["study"]),
        space=load_space(str(spec["space"])),
        backend="process",
        trials=int(str(spec["trials"])),
        studies_dir=Path(str(spec["studies_dir"])),
        sampler="random",
        confirm_top=0,
        prefetch=False,  # the fake server loads no weights
        backend_options=BackendOptions(
            study="", settings=ProcessSettings(vllm_command=FAKE_SERVER)
        ),
        allow_power_limit=bool(spec["allow"]),
    )
    optimize(request, backend=backend, on_notice=lambda line: print(line, flush=True))
    print("DONE", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
