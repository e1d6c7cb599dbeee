"""Runs ``vllm serve`` (or any command speaking its flags) as a child process on a free port.

The child gets its own session, hence its own process group: vLLM's engine core and workers
join that group, so one ``killpg`` reaches them all, and a Ctrl-C in the terminal reaches only
spectune, which then stops the server itself. Stopping is SIGTERM to the group, SIGKILL after
``stop_timeout_s``, then a sweep of group members that outlived the leader.

Nothing may outlive spectune: a launcher stops its server on ``stop()``, on leaving a ``with``
block, on any exception (KeyboardInterrupt included) during ``start()``, and at interpreter exit.
SIGTERM and SIGHUP, which would otherwise end Python without running ``atexit``, unwind like
Ctrl-C when nobody else has claimed them (:mod:`tuner.launch.exit_hooks`). Against SIGKILL,
which runs nothing, the server dies with its parent, a guardian process stops the rest of its
group (:mod:`tuner.launch.guardian`), and each start leaves a run file from which every later
start on the host removes what a dead run left (:mod:`tuner.launch.runfiles`).

The server writes into a pipe, not its log file: :class:`~tuner.launch.logpump.LogPump` copies
it there with secrets redacted, so no token it prints reaches the file, the database's
``log_tail``, the dashboard or the terminal.

The leader is reaped only after the sweep (exit statuses are read with ``WNOWAIT``): while it
is an unreaped zombie its PID, and so the group ID, cannot be reused by an unrelated process.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tuner.config.redact import Redactor
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import (
    VllmVersion,
    check_supported,
    detect_version,
    measurement_flags,
    server_argv,
)
from tuner.errors import ConfigError, LaunchError, StartupFailure
from tuner.launch.base import LOG_NOTE, READY_TIMEOUT_S
from tuner.launch.exit_hooks import run_at_exit
from tuner.launch.failures import ServerEnd, Stage
from tuner.launch.guardian import dismiss_guardian, spawn_guardian
from tuner.launch.logpump import LogPump
from tuner.launch.readiness import StartupWatch, wait_until_ready
from tuner.launch.runfiles import (
    RunFile,
    die_with_parent,
    group_members,
    remove_leftovers,
    require_writable,
    signal_group,
    state_dir,
    wait_group_empty,
)
from tuner.results import Endpoint, OnStartup

__all__ = ["ProcessLauncher"]

_LOG_TAIL_BYTES = 256 * 1024  # enough for vLLM's longest start-up traceback
_PORT_TAKEN = ("Address already in use", "[Errno 98]")
_SWEEP_GRACE_S = 5.0  # how long engine-core/worker children get to follow their parent
# Marks the command line the launcher writes atop each log; kept out of classification, where
# the flags it quotes (a served name, a path) could pass for the server's own words.
_HEADER = "spectune$ "


@dataclass(frozen=True)
class _Child:
    """A running server: its process, its SIGTERM grace, log, guardian and run file."""

    proc: subprocess.Popen[bytes]
    stop_timeout_s: float
    pump: LogPump
    guardian: subprocess.Popen[bytes] | None  # None when it could not be started
    run_file: Path | None  # None when it could not be written


# Every child still running: strong references, so a launcher that was dropped without stop()
# still has its server stopped at exit.
_running: dict[int, _Child] = {}
_hooks_installed = False
_hooks_lock = threading.Lock()


def _stop_all() -> None:
    # No launcher locks here: a daemon thread may hold one, blocked in a readiness wait.
    for child in list(_running.values()):
        _terminate(child)


def _install_hooks() -> None:
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        run_at_exit(_stop_all)
        _hooks_installed = True


def _free_port(host: str) -> int:
    """A port nobody listens on now (the server binds it moments later; a clash is retried)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _oom_kills() -> int | None:
    """The kernel's count of OOM kills since boot (``/proc/vmstat``); None where unknown.

    A server killed by SIGKILL is out of memory only if this count moved while it ran: a
    ``kill -9`` from someone else is a crash, not a memory limit for the sampler to learn.
    """
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _client_host(host: str) -> str:
    """Where clients reach a server listening on ``host`` (a wildcard means this machine)."""
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1"}
    reachable = wildcard.get(host, host)
    return f"[{reachable}]" if ":" in reachable else reachable


def _exit_status_of(proc: subprocess.Popen[bytes]) -> int | None:
    """The exit status (negative for a signal, like Popen), without reaping the process."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped elsewhere; Popen knows the status then
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _exit_status_of(proc) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _terminate(child: _Child) -> None:
    """SIGTERM to the group, SIGKILL after ``stop_timeout_s``, sweep stragglers, then reap."""
    proc, stop_timeout_s = child.proc, child.stop_timeout_s
    pgid = proc.pid  # start_new_session made the child its group's leader
    if _exit_status_of(proc) is None:
        signal_group(pgid, signal.SIGTERM)
        if not _wait_exit(proc, stop_timeout_s):
            signal_group(pgid, signal.SIGKILL)
            # In the log the trial points to: a server that ignores SIGTERM is a fault to see.
            child.pump.note(
                f"{LOG_NOTE}server {pgid} ignored SIGTERM for {stop_timeout_s:g} s; "
                "its process group was killed (SIGKILL)"
            )
            _wait_exit(proc, stop_timeout_s)
    # The leader has exited but is not reaped yet, so the group ID cannot have been reused.
    # Members that outlived it (it may have died on its own) get the same TERM-then-KILL.
    if group_members(pgid):
        signal_group(pgid, signal.SIGTERM)
        if not wait_group_empty(pgid, _SWEEP_GRACE_S):
            signal_group(pgid, signal.SIGKILL)
            wait_group_empty(pgid, _SWEEP_GRACE_S)
    try:
        proc.wait(timeout=stop_timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"server process {pgid} survived SIGKILL (stuck in the kernel?)") from exc
    finally:
        _running.pop(pgid, None)
        child.pump.close()
        dismiss_guardian(child.guardian)
        if child.run_file is not None:
            child.run_file.unlink(missing_ok=True)


class ProcessLauncher:
    """Starts one vLLM server at a time as a local child process.

    Args:
        command: the program, e.g. ``("vllm",)``, ``("/opt/vllm-cpu/bin/vllm",)`` or a fake
            server ``("python", "-m", "tuner.sim.server")``; it must answer ``--version``
            unless ``version`` is given.
        version: the vLLM flag dialect to speak; None asks ``<command> --version`` once.
        host: the address the server listens on and is probed at.
        ready_timeout_s: how long start-up may take before it is a ``timeout`` failure.
        env: variables set on top of this process's environment (also for ``--version``).
        stop_timeout_s: how long SIGTERM may take before SIGKILL.
        subcommand: inserted after ``command``; ``()`` for a server without one.
        poll_s: pause between readiness probes (an early exit is noticed within it).
        run_dir: where run files go (default :func:`~tuner.launch.runfiles.state_dir`); the
            first start also removes the servers of dead runs recorded there.
        on_startup: where each start reports its phases, read from the server's log.
    """

    name = "process"

    def __init__(  # noqa: PLR0913  (one keyword per process-backend setting)
        self,
        command: Sequence[str] = ("vllm",),
        version: VllmVersion | None = None,
        host: str = "127.0.0.1",
        ready_timeout_s: float = READY_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        stop_timeout_s: float = 20,
        *,
        subcommand: Sequence[str] = ("serve",),
        poll_s: float = 0.5,
        run_dir: Path | None = None,
        on_startup: OnStartup | None = None,
    ) -> None:
        if not command:
            raise LaunchError("ProcessLauncher needs a command, e.g. ('vllm',)")
        self.command = tuple(command)
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.subcommand = tuple(subcommand)
        self.poll_s = poll_s
        self.run_dir = run_dir or state_dir()
        self.on_startup = on_startup
        self._env = {**os.environ, **(env or {})}
        self._redactor = Redactor.from_environment(self._env)
        self._version = version
        self._lock = threading.RLock()
        self._child: _Child | None = None
        self._log_path: Path | None = None
        self._oom_before: int | None = None

    @property
    def pid(self) -> int | None:
        """The running server's PID (also its process group ID), None when none runs."""
        return self._child.proc.pid if self._child is not None else None

    @property
    def version(self) -> VllmVersion:
        """The dialect spoken, from the constructor or, once, from ``<command> --version``."""
        if self._version is None:
            self._version = detect_version(self.command, env=self._env)
        return self._version

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        """Starts ``server``, stopping the previous one first, and returns once it answers.

        The log goes to ``context.log_dir / f"trial-{context.trial}.log"``.

        Raises:
            ConfigError: the vLLM version cannot run this config, or no run file can be
                written (:func:`~tuner.launch.runfiles.require_writable`); nothing was started.
            StartupFailure: the server exited or was not ready in time; it has been stopped.
        """
        _install_hooks()
        with self._lock:
            self.stop()
            version = self.version
            check_supported(server, version)
            require_writable(self.run_dir)
            # Every start, not only the first: a worker beside this one may have been killed.
            remove_leftovers(self.run_dir)
            context.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = context.log_dir / f"trial-{context.trial}.log"
            served = server.served_model_name or server.model
            watch = StartupWatch(self.on_startup)  # one clock across a port retry
            # One retry: another process may grab the free port between probe and bind.
            for attempt in (1, 2):
                port = _free_port(self.host)
                argv = self._argv(server, version, port)
                self._spawn(argv, log_path, port, append=attempt > 1)
                base_url = f"http://{_client_host(self.host)}:{port}"
                try:
                    wait_until_ready(
                        base_url,
                        timeout_s=self.ready_timeout_s,
                        exited=self._exit_status,
                        log_tail=self._read_log,
                        poll_s=self.poll_s,
                        model=served,
                        oom_killed=self._oom_killed,
                        watch=watch,
                    )
                except StartupFailure:
                    self.stop()
                    if attempt == 1 and any(p in self._read_log(log_path) for p in _PORT_TAKEN):
                        continue
                    raise
                except BaseException:
                    self.stop()  # KeyboardInterrupt, SystemExit from SIGTERM, bugs: no orphans
                    raise
                return Endpoint(base_url=base_url, model=served, log_path=log_path)
        raise AssertionError("unreachable")  # the loop returns or raises

    def ended(self) -> ServerEnd | None:
        """How the running server ended, read after a measurement; None while it runs."""
        code = self._exit_status()
        if code is None:
            return None
        return ServerEnd(code, self._read_log(), self._oom_killed(), Stage.MEASURING)

    def close(self) -> None:
        """The same as :meth:`stop`: a process launcher holds nothing beyond its server."""
        self.stop()

    def stop(self) -> None:
        """Stops the server and every process in its group; idempotent."""
        with self._lock:
            child, self._child = self._child, None
            if child is not None:
                _terminate(child)

    def __enter__(self) -> ProcessLauncher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _argv(self, server: ServerConfig, version: VllmVersion, port: int) -> list[str]:
        return [
            *self.command,
            *self.subcommand,
            *server_argv(server, version, host=self.host, port=port),
            *measurement_flags(server, version),
        ]

    def _spawn(self, argv: list[str], log_path: Path, port: int, *, append: bool) -> None:
        header = f"{_HEADER}{shlex.join(argv)}\n"
        pump = LogPump(log_path, self._redactor, header, append=append)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=pump.write_fd,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        except OSError as exc:
            pump.close()
            raise LaunchError(f"cannot run {argv[0]!r}: {exc.strerror}") from exc
        pump.start()
        self._log_path = log_path
        self._oom_before = _oom_kills()
        guardian = spawn_guardian(proc.pid, RunFile.path_of(self.run_dir, proc.pid))
        command = self._redactor.redact(shlex.join(argv))
        run_file = RunFile.write(self.run_dir, proc.pid, self.host, port, command)
        self._child = _Child(proc, self.stop_timeout_s, pump, guardian, run_file)
        _running[proc.pid] = self._child
        if run_file is None:  # the folder broke since require_writable: stop while we can
            self.stop()
            raise ConfigError(f"cannot record server {proc.pid} in {self.run_dir}; it was stopped")

    def _exit_status(self) -> int | None:
        return _exit_status_of(self._child.proc) if self._child is not None else None

    def _oom_killed(self) -> bool:
        before, now = self._oom_before, _oom_kills()
        killed = self._exit_status() == -signal.SIGKILL
        return killed and before is not None and now is not None and now > before

    def _read_log(self, path: Path | None = None) -> str:
        path = path or self._log_path
        if path is None:
            return ""
        if self._child is not None and path == self._log_path:
            self._child.pump.sync()  # the lines the server wrote before it exited
        try:
            with path.open("rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(0, size - _LOG_TAIL_BYTES))
                data = log.read()
        except OSError:
            return ""
        lines = data.decode("utf-8", errors="replace").splitlines()
        if size > _LOG_TAIL_BYTES:
            lines = lines[1:]  # the first one was cut in half by the seek
        return "\n".join(line for line in lines if not line.startswith(_HEADER))
