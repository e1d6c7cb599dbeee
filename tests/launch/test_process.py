"""The process launcher against a steerable fake ``vllm serve`` (tests/launch/fake_vllm.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from testbed.processes import is_running, running_in_group

from tuner.config.trial import FlagValue, LaunchContext, ServerConfig, SpeculativeConfig
from tuner.config.vllm_args import parse_version
from tuner.errors import ConfigError, FailureKind, LaunchError, StartupFailure
from tuner.launch import process
from tuner.launch.process import ProcessLauncher

V0_32 = parse_version("0.32.0")


def _server(*fake_flags: tuple[str, FlagValue]) -> ServerConfig:
    return ServerConfig(
        model="tiny-model",
        tensor_parallel_size=1,
        max_model_len=512,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=512,
        served_model_name="tiny",
        extra_flags=fake_flags,
    )


def _launcher(command: tuple[str, ...], **kwargs: object) -> ProcessLauncher:
    options: dict[str, object] = {"version": V0_32, "ready_timeout_s": 30.0, "poll_s": 0.05}
    options.update(kwargs)
    return ProcessLauncher(command, **options)  # type: ignore[arg-type]


def _start_failure(
    launcher: ProcessLauncher, server: ServerConfig, context: LaunchContext
) -> StartupFailure:
    with pytest.raises(StartupFailure) as caught:
        launcher.start(server, context)
    assert launcher.pid is None
    return caught.value


def test_start_serves_and_stop_leaves_nothing_behind(
    fake_command: tuple[str, ...], context: LaunchContext, tmp_path: Path
) -> None:
    child_pidfile = tmp_path / "child.pid"
    with _launcher(fake_command) as launcher:
        endpoint = launcher.start(_server(("fake-child", str(child_pidfile))), context)
        pid = launcher.pid
        assert pid is not None
        assert os.getpgid(pid) == pid  # its own process group, apart from ours
        assert os.getsid(pid) == pid
        child = int(child_pidfile.read_text())
        assert os.getpgid(child) == pid

        assert endpoint.model == "tiny"
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        assert endpoint.log_path == context.log_dir / "trial-7.log"
        assert httpx.get(f"{endpoint.base_url}/health", trust_env=False).status_code == 200

        launcher.stop()
        assert launcher.pid is None
        assert not is_running(pid) and not is_running(child)
        assert running_in_group(pid) == []
        launcher.stop()  # idempotent

    log = endpoint.log_path.read_text()
    first_line = log.splitlines()[0]
    assert first_line.startswith(f"spectune$ {sys.executable} ")
    assert " serve tiny-model --host 127.0.0.1 --port " in first_line
    assert "serving tiny" in log


def test_early_exit_is_noticed_at_once(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    launcher = _launcher(fake_command, ready_timeout_s=120.0)
    server = _server(("fake-exit", 1), ("fake-message", "KeyError: 'model_type'"))
    started = time.monotonic()

    failure = _start_failure(launcher, server, context)

    assert time.monotonic() - started < 10  # the fake's Python start-up, not the 120-s timeout
    assert failure.kind is FailureKind.CRASH
    assert failure.exit_code == 1
    assert str(failure) == "vLLM did not start (crash, exit status 1): KeyError: 'model_type'"
    assert failure.log_tail.endswith("KeyError: 'model_type'")
    assert "KeyError: 'model_type'" in (context.log_dir / "trial-7.log").read_text()


def test_out_of_memory_message_is_oom(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    server = _server(("fake-exit", 1), ("fake-message", message))
    failure = _start_failure(_launcher(fake_command), server, context)
    assert failure.kind is FailureKind.OOM
    assert message in str(failure)


def test_sigkill_from_outside_is_oom(fake_command: tuple[str, ...], context: LaunchContext) -> None:
    failure = _start_failure(_launcher(fake_command), _server(("fake-sigkill-self", True)), context)
    assert failure.kind is FailureKind.OOM
    assert failure.exit_code == -signal.SIGKILL
    assert "killed by SIGKILL" in str(failure)


def test_unknown_flag_is_bad_argument(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    failure = _start_failure(_launcher(fake_command), _server(("no-such-flag", True)), context)
    assert failure.kind is FailureKind.BAD_ARGUMENT
    assert failure.exit_code == 2
    assert "error: unrecognized arguments: --no-such-flag" in str(failure)


def test_never_ready_times_out_and_is_stopped(
    fake_command: tuple[str, ...], context: LaunchContext, tmp_path: Path
) -> None:
    child_pidfile = tmp_path / "child.pid"
    launcher = _launcher(fake_command, ready_timeout_s=1.5)
    server = _server(("fake-never-ready", True), ("fake-child", str(child_pidfile)))

    failure = _start_failure(launcher, server, context)

    assert failure.kind is FailureKind.TIMEOUT
    assert failure.exit_code is None
    assert "still not ready after 1.5 s" in str(failure)
    assert "/health answered 503" in str(failure)
    assert not is_running(int(child_pidfile.read_text()))


def test_sigterm_ignored_escalates_to_sigkill(
    fake_command: tuple[str, ...], context: LaunchContext, tmp_path: Path
) -> None:
    child_pidfile = tmp_path / "child.pid"
    launcher = _launcher(fake_command, stop_timeout_s=1.0)
    server = _server(("fake-ignore-sigterm", True), ("fake-child", str(child_pidfile)))
    launcher.start(server, context)
    pid = launcher.pid
    assert pid is not None

    started = time.monotonic()
    launcher.stop()

    assert 1.0 <= time.monotonic() - started < 10
    assert running_in_group(pid) == []
    assert not is_running(int(child_pidfile.read_text()))


def test_members_that_outlive_the_leader_are_swept(
    fake_command: tuple[str, ...], context: LaunchContext, tmp_path: Path
) -> None:
    # The leader exits by itself; its grandchild (like a stuck engine core) stays behind.
    child_pidfile = tmp_path / "child.pid"
    server = _server(("fake-child", str(child_pidfile)), ("fake-exit", 1))
    _start_failure(_launcher(fake_command), server, context)
    assert not is_running(int(child_pidfile.read_text()))


def test_exception_in_a_with_block_stops_the_server(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    pid = None
    with pytest.raises(RuntimeError, match="measurement blew up"), _launcher(fake_command) as lau:
        lau.start(_server(), context)
        pid = lau.pid
        raise RuntimeError("measurement blew up")
    assert pid is not None and running_in_group(pid) == []


def test_interrupt_during_start_stops_the_server(
    fake_command: tuple[str, ...], context: LaunchContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[int] = []

    def interrupted(*args: object, **kwargs: object) -> None:
        spawned.append(launcher.pid or 0)
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "wait_until_ready", interrupted)
    launcher = _launcher(fake_command)
    with pytest.raises(KeyboardInterrupt):
        launcher.start(_server(), context)
    assert spawned[0] > 0
    assert running_in_group(spawned[0]) == []
    assert launcher.pid is None


def test_start_replaces_the_running_server(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    with _launcher(fake_command) as launcher:
        first = launcher.start(_server(), context)
        first_pid = launcher.pid
        second = launcher.start(_server(), replace(context, trial=8))
        assert first_pid is not None and not is_running(first_pid)
        assert second.log_path == context.log_dir / "trial-8.log"
        assert first.base_url != second.base_url or launcher.pid != first_pid


def test_port_clash_is_retried_once(
    fake_command: tuple[str, ...], context: LaunchContext, tmp_path: Path
) -> None:
    marker = tmp_path / "port-taken-once"
    with _launcher(fake_command) as launcher:
        endpoint = launcher.start(_server(("fake-port-taken-once", str(marker))), context)
        assert marker.exists()
        log = (context.log_dir / "trial-7.log").read_text()
    assert log.count("spectune$ ") == 2  # both attempts' command lines, in one log
    assert "Address already in use" in log
    assert endpoint.model == "tiny"


def test_config_file_mode_writes_the_yaml_next_to_the_log(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    with _launcher(fake_command, use_config_file=True) as launcher:
        endpoint = launcher.start(_server(), context)
    config = (context.log_dir / "trial-7.yaml").read_text()
    assert config.startswith("model: tiny-model\n")
    assert "served-model-name: tiny\n" in config
    assert endpoint.model == "tiny"
    first_line = (context.log_dir / "trial-7.log").read_text().splitlines()[0]
    assert f" serve --config {context.log_dir / 'trial-7.yaml'} --host 127.0.0.1" in first_line


def test_version_is_asked_from_the_command_once(fake_command: tuple[str, ...]) -> None:
    launcher = ProcessLauncher(fake_command)
    assert launcher.version == parse_version("0.32.0+cpu")
    assert str(launcher.version) == "0.32.0+cpu"


def test_a_config_the_version_cannot_run_starts_nothing(
    fake_command: tuple[str, ...], context: LaunchContext
) -> None:
    drafted = replace(_server(), speculative=SpeculativeConfig("draft_model", 3, model="d"))
    launcher = _launcher(fake_command, version=parse_version("0.12.0"))
    with pytest.raises(ConfigError, match="separate draft model"):
        launcher.start(drafted, context)
    assert launcher.pid is None
    assert not (context.log_dir / "trial-7.log").exists()


def test_a_missing_command_is_a_launch_error(context: LaunchContext) -> None:
    with pytest.raises(LaunchError, match="cannot run '/nonexistent/vllm'"):
        _launcher(("/nonexistent/vllm",)).start(_server(), context)
    with pytest.raises(ConfigError, match="not found"):
        ProcessLauncher(("/nonexistent/vllm",)).start(_server(), context)


_DRIVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tuner.config.trial import LaunchContext
from tuner.launch.process import ProcessLauncher
from tuner.config.trial import ServerConfig
from tuner.config.vllm_args import parse_version

launcher = ProcessLauncher({command!r}, version=parse_version("0.32.0"), poll_s=0.05)
server = ServerConfig("tiny-model", 1, 512, 0.9, 512, extra_flags=(("fake-child", {pidfile!r}),))
launcher.start(server, LaunchContext("s", 1, Path({logs!r})))
print(launcher.pid, flush=True)
{then}
"""


def _driver(tmp_path: Path, fake_command: tuple[str, ...], then: str) -> subprocess.Popen[str]:
    """A separate Python process (like ``spectune optimize``) that starts a fake server."""
    script = _DRIVER.format(
        root=str(Path(__file__).parents[2]),
        command=fake_command,
        pidfile=str(tmp_path / "child.pid"),
        logs=str(tmp_path / "logs"),
        then=textwrap.dedent(then),
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_forgotten_server_is_stopped_at_exit(
    fake_command: tuple[str, ...], tmp_path: Path
) -> None:
    driver = _driver(tmp_path, fake_command, "sys.exit(0)  # no stop()")
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 0, err
    pid = int(out.split()[0])
    assert running_in_group(pid) == []
    assert not is_running(int((tmp_path / "child.pid").read_text()))


def test_sigterm_to_spectune_stops_the_server(
    fake_command: tuple[str, ...], tmp_path: Path
) -> None:
    driver = _driver(tmp_path, fake_command, "time.sleep(60)")
    assert driver.stdout is not None
    pid = int(driver.stdout.readline())
    assert is_running(pid)

    driver.send_signal(signal.SIGTERM)
    driver.communicate(timeout=60)

    assert driver.returncode == 128 + signal.SIGTERM
    assert running_in_group(pid) == []
    assert not is_running(int((tmp_path / "child.pid").read_text()))


@pytest.mark.parametrize(("host", "url_host"), [("0.0.0.0", "127.0.0.1"), ("::1", "[::1]")])
def test_wildcard_and_ipv6_hosts_are_probed_where_reachable(
    fake_command: tuple[str, ...], context: LaunchContext, host: str, url_host: str
) -> None:
    with _launcher(fake_command, host=host) as launcher:
        endpoint = launcher.start(_server(), context)
    assert endpoint.base_url.startswith(f"http://{url_host}:")
