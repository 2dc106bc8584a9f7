"""The embedded default: a tritonserver process on this machine.

Where tritonserver comes from, in order: ``--tritonserver PATH``; ``tritonserver`` on PATH
(with ``/opt/tritonserver/backends`` as in the NGC image); the nvidia-pytriton wheel (the
``local`` extra), which needs its bundled libraries on LD_LIBRARY_PATH and a backend folder
whose python stub matches this interpreter. The server's PATH starts with this
interpreter's ``bin`` so the python backend stub finds the packages of this environment.

The server runs in its own process group; teardown is SIGTERM to the group, then SIGKILL after
``STOP_TIMEOUT_S``, the launchers' one stop bound (15 s; no verdict depends on it). The tuner's
servers, once measured, get SIGKILL at once, and the python backend's shared memory they leave
is removed. Teardown always happens (exceptions, Ctrl-C) because :meth:`Launcher.serve` is a
context manager.
On Linux the whole process group (tritonserver and its python backend stubs) also gets
SIGKILL when the thread that started it ends, so even ``kill -9`` of the tuner leaves nothing
running (:mod:`autotune.guard`): start servers from a thread that outlives them (the tuner
starts them all from its main thread). Every started server is also recorded in a pid file,
so a later start reaps what a killed run left where the kernel cannot do it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import LaunchError
from autotune.launch import _pids
from autotune.launch._base import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    Launcher,
    Ports,
    Server,
    Started,
    metrics_args,
)
from autotune.processes import child_of, group_members, pid_alive
from autotune.settings import LocalOptions
from autotune.staging import safe_path, safe_temp

SHM_DIR = Path("/dev/shm")
PYTHON_ENV_DIR, PYTHON_ENV_GLOB = Path("/tmp"), "python_env_*"  # the python backend's, see remove_python_envs
SHM_PREFIX = "autotune_pb_"  # the python backend's shared memory of our servers: SHM_PREFIX<pid>_<n>_...
_SERVERS = itertools.count()
GUARD = (sys.executable, "-m", "autotune.guard")  # see autotune/guard.py


@dataclass(frozen=True)
class Installation:
    """A tritonserver binary and what it needs to run."""

    binary: Path
    backend_dir: Path
    library_path: tuple[Path, ...] = ()


def find_installation(binary: Path | None = None, cache_dir: Path | None = None) -> Installation:
    if binary is not None:
        if not binary.is_file():
            raise LaunchError(f"tritonserver not found at {binary}", hint="check --tritonserver")
        return Installation(binary, _ngc_backends(binary))
    on_path = shutil.which("tritonserver")
    if on_path:
        return Installation(Path(on_path), _ngc_backends(Path(on_path)))
    wheel = _pytriton_installation(_safe_cache(cache_dir or _default_cache()))
    if wheel is None:
        raise LaunchError(
            "no tritonserver found: not on PATH and the nvidia-pytriton wheel is not installed",
            hint="pip install 'autotune[local]', or use --launcher docker / --tritonserver PATH",
        )
    return wheel


def _ngc_backends(binary: Path) -> Path:
    return binary.resolve().parent.parent / "backends"


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune"


def _safe_cache(cache_dir: Path) -> Path:
    """Where the python backend's folder is copied: the cache, unless its path has characters
    the backend's stub cannot take (it is started through a shell line that carries its path
    unquoted: :mod:`autotune.staging`), then a folder of the temporary folder."""
    return cache_dir if safe_path(cache_dir.resolve()) else safe_temp(f"autotune-cache-{os.getuid()}")


def _pytriton_installation(cache_dir: Path) -> Installation | None:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    binary = root / "bin" / "tritonserver"
    if not binary.is_file():
        return None
    libs = root.parent.parent / "nvidia_pytriton.libs"
    return Installation(binary, _python_backend_dir(root, cache_dir), (libs,))


def _python_backend_dir(root: Path, cache_dir: Path) -> Path:
    """A backend folder with the python backend and the stub for this interpreter."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise LaunchError(f"nvidia-pytriton has no python backend stub for Python {version}")
    files = [*sorted((root / "backends" / "python").glob("*.*")), stub]
    digest = hashlib.sha256("".join(f"{f}:{f.stat().st_size}" for f in files).encode()).hexdigest()[:12]
    target = cache_dir / "backends" / digest
    python = target / "python"
    if not (python / stub.name).is_file():
        tmp = cache_dir / "backends" / f".{digest}.{os.getpid()}"
        (tmp / "python").mkdir(parents=True, exist_ok=True)
        for item in files:
            shutil.copy2(item, tmp / "python" / item.name)
        try:
            tmp.rename(target)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class LocalLauncher(Launcher["subprocess.Popen[bytes]"]):
    """Starts one tritonserver process per :meth:`serve`."""

    name = "local"

    def __init__(
        self,
        installation: Installation | None = None,
        *,
        pid_dir: Path | None = None,
        extra_args: tuple[str, ...] = (),
        ready_timeout_s: float = READY_TIMEOUT_S,
        kill_when_done: bool = False,
    ) -> None:
        super().__init__(ready_timeout_s=ready_timeout_s)
        self._installation = installation
        self._pid_dir = pid_dir
        self._extra_args = extra_args
        # A graceful stop takes seconds (the python backend's stubs unload one after another) and
        # tears them down while the next server is measured: it read bertQA's first point at p99
        # 58.2 ms against 43.0 after a kill (benchmarks/results/first-window-20261204.txt, its
        # stop_overlap part). So a server done with is killed, its group at once, and the shared
        # memory its stubs left removed; an error or an interrupt still stops it gracefully.
        self._kill_when_done = kill_when_done
        self._shm: dict[int, str] = {}  # a running server's (by pid) python backend shared-memory prefix
        self._started: dict[int, float] = {}  # a running server's (by pid) start, on the file clock

    @classmethod
    def from_options(cls, options: LocalOptions, *, extra_args: tuple[str, ...] = ()) -> LocalLauncher:
        """Reap what killed runs left, find tritonserver: before the first trial."""
        _pids.reap()
        reap_shared_memory()
        return cls(find_installation(options.tritonserver), extra_args=extra_args, kill_when_done=True)

    @property
    def installation(self) -> Installation:
        if self._installation is None:
            self._installation = find_installation()
        return self._installation

    def _start(
        self, repository: Path, model: str, log_path: Path, ports: Ports
    ) -> Started[subprocess.Popen[bytes]]:
        proc = self._spawn(repository, log_path, ports)
        pid = child_of(proc.pid)  # the server's own pid (``proc`` is its guard's): messages name it
        server = Server(
            "127.0.0.1", ports.http, ports.grpc, log_path,
            alive=lambda: proc.poll() is None,
            description=f"tritonserver (pid {pid})" if pid else f"tritonserver (guard pid {proc.pid})",
            metrics_url=f"http://127.0.0.1:{ports.metrics}/metrics", pid=pid or 0,
        )  # fmt: skip
        return Started(server, proc, exit_detail=lambda: f" with exit code {proc.poll()}")

    def _stop(self, started: Started[subprocess.Popen[bytes]], *, failed: bool) -> None:
        proc = started.handle
        stop_process(proc, timeout_s=0.0 if self._kill_when_done and not failed else STOP_TIMEOUT_S)
        _pids.forget(self._pid_dir, proc.pid)
        prefix = self._shm.pop(proc.pid, "")
        for region in SHM_DIR.glob(f"{prefix}*") if prefix else ():  # a killed stub's, or a crashed one's
            region.unlink(missing_ok=True)
        since = self._started.pop(proc.pid, None)
        if since is not None:
            remove_python_envs(since)

    def _spawn(self, repository: Path, log_path: Path, ports: Ports) -> subprocess.Popen[bytes]:
        """tritonserver under its guard (:mod:`autotune.guard`), which leads the new process group
        and takes the whole group down if this process dies."""
        inst = self.installation
        shm = f"{SHM_PREFIX}{os.getpid()}_{next(_SERVERS)}_"
        args = [
            *GUARD,
            str(os.getpid()),
            "--",
            str(inst.binary),
            f"--model-repository={repository}",
            f"--backend-directory={inst.backend_dir}",
            "--http-address=127.0.0.1",
            f"--http-port={ports.http}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={ports.grpc}",
            *metrics_args(ports.metrics, "127.0.0.1"),
            "--exit-timeout-secs=5",
            f"--backend-config=python,shm-region-prefix-name={shm}",
            "--log-verbose=0",
            *self._extra_args,
        ]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            since = os.stat(log.fileno()).st_mtime  # the file clock, as the folders' times read it
            try:
                proc = subprocess.Popen(
                    args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self._environment(),
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"cannot start {inst.binary}: {exc}") from exc
        try:
            _pids.remember(self._pid_dir, proc.pid, " ".join(GUARD))
            self._shm[proc.pid] = shm
            self._started[proc.pid] = since
        except BaseException:
            stop_process(proc)
            raise
        return proc

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        libs = [str(p) for p in self.installation.library_path]
        if libs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        return env


def remove_python_envs(since: float, directory: Path = PYTHON_ENV_DIR) -> list[Path]:
    """Remove the empty ``python_env_*`` folders made in ``directory`` at or after ``since``
    (a file-clock time) by this user. Triton's python backend makes one in /tmp for each server
    and removes it only on a graceful exit, which a server killed once measured never has.
    A folder in use is not empty (an execution environment unpacked there): it stays."""
    removed = []
    for folder in directory.glob(PYTHON_ENV_GLOB):
        with contextlib.suppress(OSError):  # gone, not ours, or not empty
            info = folder.lstat()
            if info.st_uid == os.getuid() and info.st_ctime >= since:
                folder.rmdir()
                removed.append(folder)
    return removed


def reap_shared_memory(directory: Path = SHM_DIR) -> list[Path]:
    """Remove the python backend shared memory our servers left where the process that started
    them is gone (a killed run: its guard ended the servers, nothing removed their regions)."""
    removed = []
    for region in directory.glob(f"{SHM_PREFIX}*"):
        owner = region.name[len(SHM_PREFIX) :].split("_", 1)[0]
        if owner.isdigit() and not pid_alive(int(owner)):
            region.unlink(missing_ok=True)
            removed.append(region)
    return removed


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process group, wait, then SIGKILL (``timeout_s`` 0: SIGKILL at once); return
    once no process of the group is left alive (the stubs die after their server: a SIGKILL is
    delivered, not waited for), or after STOP_TIMEOUT_S. Never raises for a gone process.

    Once the leader is reaped, its pid names our group only while no process has that pid: the
    kernel keeps a group's id from new processes while the group has members, so a live process
    of that pid (a stop long after the server ended) means the group is gone and the pid is
    another's, maybe another server's group, which is left alone."""
    if proc.poll() is None:
        if timeout_s > 0:
            _signal_group(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout_s)
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    if pid_alive(proc.pid):
        return
    _signal_group(proc.pid, signal.SIGKILL)  # stubs left behind in the group, if any
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
