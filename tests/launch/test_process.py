"""The process launcher's own mechanics, against the shipped fake server.

What every backend must do (start, classify start-up failures, stop, leave nothing) is the
backend contract (tests/trial/backends); here: process groups, the log, port clashes, config files,
signals and SIGKILL of spectune itself.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.testbed.fake_server import SERVER as FAKE_SERVER
from tests.testbed.processes import is_running, running_in_group
from tuner.config.trial import LaunchContext, ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import NEWEST_KNOWN, parse_version
from tuner.errors import ConfigError, FailureKind, LaunchError, StartupFailure
from tuner.launch import process
from tuner.launch.process import ProcessLauncher

SERVER = ServerConfig("Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048, served_model_name="tiny")
_CHILD = re.compile(r"spawned child process (\d+)")


def _launcher(*faults: str, **kwargs: object) -> ProcessLauncher:
    options: dict[str, object] = {
        "version": NEWEST_KNOWN,
        "ready_timeout_s": 30.0,
        "poll_s": 0.05,
        "env": {"SPECTUNE_SIM_SPEED": "50", "SPECTUNE_SIM_FAULT": ",".join(faults)},
    }
    options.update(kwargs)
    return ProcessLauncher(FAKE_SERVER, **options)  # type: ignore[arg-type]


def _child_pid(log: Path) -> int:
    match = _CHILD.search(log.read_text())
    assert match, log.read_text()
    return int(match.group(1))


def test_the_server_runs_in_its_own_group_and_stop_takes_the_group(
    context: LaunchContext,
) -> None:
    with _launcher("spawn-child") as launcher:
        endpoint = launcher.start(SERVER, context)
        pid = launcher.pid
        assert pid is not None
        assert os.getpgid(pid) == pid == os.getsid(pid)  # apart from ours: Ctrl-C is ours
        assert endpoint.log_path == context.log_dir / "trial-7.log"
        child = _child_pid(endpoint.log_path)
        assert os.getpgid(child) == pid
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{endpoint.base_url}/health", trust_env=False).status_code == 200

        launcher.stop()
        assert launcher.pid is None
        assert not is_running(pid) and not is_running(child)
        assert running_in_group(pid) == []

    first_line = endpoint.log_path.read_text().splitlines()[0]
    assert first_line.startswith(f"spectune$ {sys.executable} -m tuner.sim.server serve ")
    assert " --host 127.0.0.1 --port " in first_line


def test_a_sigkill_that_is_no_memory_kill_is_a_crash(context: LaunchContext) -> None:
    # The kernel's OOM-kill count did not move: kill -9, not the OOM killer.
    with pytest.raises(StartupFailure) as caught:
        _launcher("sigkill-at-start").start(SERVER, context)
    assert caught.value.kind is FailureKind.CRASH
    assert caught.value.exit_code == -signal.SIGKILL
    assert "killed by SIGKILL" in str(caught.value)


def test_members_that_outlive_the_leader_are_swept(context: LaunchContext) -> None:
    # The leader exits by itself; its child (like a stuck engine core) stays behind.
    with pytest.raises(StartupFailure, match="crash"):
        _launcher("spawn-child", "crash-at-start").start(SERVER, context)
    assert not is_running(_child_pid(context.log_dir / "trial-7.log"))


def test_exception_in_a_with_block_stops_the_server(context: LaunchContext) -> None:
    pid = None
    with pytest.raises(RuntimeError, match="measurement blew up"), _launcher() as launcher:
        launcher.start(SERVER, context)
        pid = launcher.pid
        raise RuntimeError("measurement blew up")
    assert pid is not None and running_in_group(pid) == []


def test_interrupt_during_start_stops_the_server(
    context: LaunchContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[int] = []

    def interrupted(*args: object, **kwargs: object) -> None:
        spawned.append(launcher.pid or 0)
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "wait_until_ready", interrupted)
    launcher = _launcher()
    with pytest.raises(KeyboardInterrupt):
        launcher.start(SERVER, context)
    assert spawned[0] > 0
    assert running_in_group(spawned[0]) == []
    assert launcher.pid is None


def test_start_replaces_the_running_server(context: LaunchContext) -> None:
    with _launcher() as launcher:
        launcher.start(SERVER, context)
        first_pid = launcher.pid
        second = launcher.start(SERVER, replace(context, trial=8))
        assert first_pid is not None and not is_running(first_pid)
        assert launcher.pid != first_pid
        assert second.log_path == context.log_dir / "trial-8.log"


def test_a_port_clash_is_retried_once(
    context: LaunchContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [taken.getsockname()[1]]  # someone binds the probed port first

        def free_port(host: str) -> int:
            return ports.pop() if ports else real_free_port(host)

        real_free_port = process._free_port
        monkeypatch.setattr(process, "_free_port", free_port)
        with _launcher() as launcher:
            endpoint = launcher.start(SERVER, context)
            log = (context.log_dir / "trial-7.log").read_text()
    assert log.count("spectune$ ") == 2  # both attempts' command lines, in one log
    assert "[Errno 98]" in log
    assert endpoint.model == "tiny"


def test_version_is_asked_from_the_command_once() -> None:
    launcher = ProcessLauncher(FAKE_SERVER)  # the test bed's fake vLLM says 0.32 (conftest)
    assert launcher.version == parse_version(os.environ["SPECTUNE_SIM_VLLM_VERSION"])


def test_a_config_the_version_cannot_run_starts_nothing(context: LaunchContext) -> None:
    drafted = replace(SERVER, speculative=SpeculativeConfig(SpecMethod.DRAFT_MODEL, 3, model="d"))
    launcher = _launcher(version=parse_version("0.12.0"))
    with pytest.raises(ConfigError, match="separate draft model"):
        launcher.start(drafted, context)
    assert launcher.pid is None
    assert not (context.log_dir / "trial-7.log").exists()


def test_a_missing_command_is_a_launch_error(context: LaunchContext) -> None:
    with pytest.raises(LaunchError, match="cannot run '/nonexistent/vllm'"):
        ProcessLauncher(("/nonexistent/vllm",), version=NEWEST_KNOWN).start(SERVER, context)
    with pytest.raises(ConfigError, match="not found"):
        ProcessLauncher(("/nonexistent/vllm",)).start(SERVER, context)


@pytest.mark.parametrize(("host", "url_host"), [("0.0.0.0", "127.0.0.1"), ("::1", "[::1]")])
def test_wildcard_and_ipv6_hosts_are_probed_where_reachable(
    context: LaunchContext, host: str, url_host: str
) -> None:
    with _launcher(host=host) as launcher:
        endpoint = launcher.start(SERVER, context)
    assert endpoint.base_url.startswith(f"http://{url_host}:")


# A separate Python process (like ``spectune optimize``) that starts a fake server.
_DRIVER = """
import sys, time
from pathlib import Path
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.launch.process import ProcessLauncher

launcher = ProcessLauncher({command!r}, version=NEWEST_KNOWN, poll_s=0.05,
                           env={{"SPECTUNE_SIM_FAULT": "spawn-child"}})
server = ServerConfig("Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048)
endpoint = launcher.start(server, LaunchContext("s", 1, Path({logs!r})))
print(launcher.pid, flush=True)
{then}
"""


def _driver(tmp_path: Path, then: str) -> subprocess.Popen[str]:
    script = _DRIVER.format(
        command=FAKE_SERVER, logs=str(tmp_path / "logs"), then=textwrap.dedent(then)
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _child_of(tmp_path: Path) -> int:
    return _child_pid(tmp_path / "logs" / "trial-1.log")


def test_a_forgotten_server_is_stopped_at_exit(tmp_path: Path) -> None:
    driver = _driver(tmp_path, "sys.exit(0)  # no stop()")
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 0, err
    assert running_in_group(int(out.split()[0])) == []
    assert not is_running(_child_of(tmp_path))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_to_spectune_stops_the_server(
    tmp_path: Path, signum: signal.Signals
) -> None:
    driver = _driver(tmp_path, "time.sleep(60)")
    assert driver.stdout is not None
    pid = int(driver.stdout.readline())
    assert is_running(pid)

    driver.send_signal(signum)
    driver.communicate(timeout=60)

    assert driver.returncode == 128 + signum  # 143 for SIGTERM, as a shell expects
    assert running_in_group(pid) == []
    assert not is_running(_child_of(tmp_path))


def test_sigkill_to_spectune_kills_the_server_and_its_children(
    tmp_path: Path, private_state_dir: Path, context: LaunchContext
) -> None:
    driver = _driver(tmp_path, "time.sleep(60)")
    assert driver.stdout is not None
    pid = int(driver.stdout.readline())
    (run_file,) = private_state_dir.iterdir()
    assert f"-{pid}.json" in run_file.name
    child = _child_of(tmp_path)

    driver.kill()
    driver.communicate(timeout=10)

    deadline = time.monotonic() + 10  # PR_SET_DEATHSIG for the leader, the guardian for the rest
    while (is_running(pid) or is_running(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(pid)
    assert not is_running(child)
    with _launcher() as launcher:
        launcher.start(SERVER, context)  # the next start removes the dead run's file
        assert not run_file.exists()
        assert [p.name for p in private_state_dir.iterdir()] == [
            f"{socket.gethostname()}-{launcher.pid}.json"
        ]
    assert list(private_state_dir.iterdir()) == []
