"""Starts the fake server through a DockerLauncher, the way a study would, then waits for a signal.

Usage: ``python signal_driver.py SPEC_JSON`` with keys image, study, log_dir, and the
launcher's entrypoint, subcommand, volumes, environment (a fake server that never gets ready
receives the signal inside ``start``); once started it prints READY and sleeps.

Deliberately no ``with`` block and no handlers of its own: the launcher's own hooks must be
enough for nothing to outlive the process.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.launch.container_spec import ContainerResources, ContainerTiming, VllmImage
from tuner.launch.docker import DockerLauncher
from tuner.launch.mounts import ContainerFiles


def main(spec: dict[str, object]) -> None:
    # Ctrl-C as a terminal delivers it: a test run started in the background (CI, nohup)
    # passes SIGINT on ignored, and Python then never turns it into KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    launcher = DockerLauncher(
        VllmImage(
            str(spec["image"]),
            entrypoint=tuple(spec["entrypoint"]),  # type: ignore[arg-type]
            subcommand=tuple(spec["subcommand"]),  # type: ignore[arg-type]
            version=NEWEST_KNOWN,
        ),
        study=str(spec["study"]),
        resources=ContainerResources(gpus=()),
        files=ContainerFiles(
            volumes=dict(spec["volumes"]),  # type: ignore[call-overload]
            environment=dict(spec["environment"]),  # type: ignore[call-overload]
        ),
        timing=ContainerTiming(ready_timeout_s=300, stop_timeout_s=10, poll_s=0.2),
    )
    server = ServerConfig("Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048)
    context = LaunchContext(str(spec["study"]), 1, Path(str(spec["log_dir"])))
    launcher.start(server, context)
    print("READY", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
