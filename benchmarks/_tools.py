"""Install and locate what the benchmarks measure with and against, idempotently.

    perf_analyzer    Triton's C++ load generator, from the ``tritonclient==2.41.0`` wheel (newer
                     wheels no longer carry it) in a venv of its own; it needs Debian's
                     ``libb64-0d`` and ``libcudart.so.12`` from pip's ``nvidia-cuda-runtime-cu12``
                     on LD_LIBRARY_PATH, which :meth:`PerfAnalyzer.env` and the wrapper script set.
    Model Analyzer   ``triton-model-analyzer==1.58.0`` in a venv of its own (it pins optuna 3.6).
    tritonserver     the nvidia-pytriton wheel of the running (autotune) venv, found the way
                     ``autotune.launch.local`` finds it, behind a wrapper script that sets the
                     library path, the backend directory and PATH (for the python backend stub),
                     so that a tool which only takes a binary path (Model Analyzer) can start it.
    example models   built once by ``examples/build_models.py`` into the cache, then copied into
                     each run's own temporary repository (``examples/model_repository`` is never
                     touched).

Everything goes under ``~/.cache/autotune-bench`` (``AUTOTUNE_BENCH_CACHE`` overrides); a second
call only checks. Only PyPI (pip) and Debian (apt-get, as root) are used.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERF_ANALYZER_REQUIREMENTS = ("tritonclient==2.41.0", "nvidia-cuda-runtime-cu12")
MODEL_ANALYZER_REQUIREMENTS = ("triton-model-analyzer==1.58.0",)
PERF_ANALYZER_APT = ("libb64-0d",)
_MARKER = ".installed"


class SetupError(RuntimeError):
    """Something the benchmark needs could not be installed or found."""


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune-bench"
    return Path(os.environ.get("AUTOTUNE_BENCH_CACHE", default))


def stop_on_sigint() -> None:
    """Ctrl-C / kill -INT stop the benchmark even when it was started as a shell's background
    job, which starts with SIGINT ignored (Python then installs no handler of its own)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def log(message: str) -> None:
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def run_checked(cmd: Sequence[str], what: str, env: dict[str, str] | None = None) -> str:
    """Run a set-up command; SetupError with the output's tail when it fails."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{tail}")
    return proc.stdout


# ---------------------------------------------------------------- apt and venvs


def apt_missing(packages: Sequence[str]) -> list[str]:
    missing = []
    for package in packages:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
        )
        if "install ok installed" not in proc.stdout:
            missing.append(package)
    return missing


def ensure_apt(packages: Sequence[str]) -> None:
    missing = apt_missing(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        raise SetupError(
            f"Debian packages {missing} are missing and this is not root: "
            f"sudo apt-get install -y {' '.join(missing)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log(f"apt-get install {' '.join(missing)}")
    run_checked(["apt-get", "update", "-q"], "apt-get update", env)
    run_checked(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], "apt-get install", env
    )


def ensure_venv(name: str, requirements: Sequence[str]) -> Path:
    """A venv at ``cache_dir()/name`` with ``requirements`` installed (checked by a marker file)."""
    venv = cache_dir() / name
    wanted = "\n".join(sorted(requirements)) + "\n"
    marker = venv / _MARKER
    python = venv / "bin" / "python"
    if marker.is_file() and marker.read_text(encoding="utf-8") == wanted and python.exists():
        return venv
    log(f"creating {venv} with {' '.join(requirements)} (a few minutes the first time)")
    if not python.exists():
        run_checked([_base_python(), "-m", "venv", str(venv)], f"python -m venv {venv}")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run_checked([*pip, *requirements], f"pip install into {venv}")
    marker.write_text(wanted, encoding="utf-8")
    return venv


def _base_python() -> str:
    # A venv's python makes a venv of its base interpreter; the system 3.11 is preferred.
    return shutil.which("python3.11", path="/usr/bin") or sys.executable


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise SetupError(f"{venv}: no site-packages folder")
    return found[0]


def _prepend_library_path(libs: str) -> str:
    return f'export LD_LIBRARY_PATH={shlex.quote(libs)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'


def write_script(path: Path, lines: Sequence[str]) -> Path:
    """Write an executable bash script (rewritten only when its text changes)."""
    text = "#!/usr/bin/env bash\n" + "\n".join(lines) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
        os.replace(tmp, path)
    return path


# ---------------------------------------------------------------- perf_analyzer


@dataclass(frozen=True)
class PerfAnalyzer:
    """The perf_analyzer binary and the library folders it needs."""

    binary: Path
    library_path: tuple[Path, ...]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        libs = [str(p) for p in self.library_path]
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
        return env

    def command(
        self,
        model: str,
        url: str,
        protocol: str,
        level: str,
        window_s: float,
        stability: float,
        max_windows: int,
        out: Path,
        *extra: str,
    ) -> list[str]:
        """One p95-stabilized measurement of ``level`` (``--concurrency-range=N`` or
        ``--request-rate-range=R``), its CSV written to ``out``; ``extra`` flags last."""
        return [str(self.binary), "-m", model, "-u", url, "-i", protocol, level, "--percentile=95",
                f"--measurement-interval={int(window_s * 1000)}", f"--stability-percentage={stability:g}",
                f"--max-trials={max_windows}", "-f", str(out), *extra]  # fmt: skip

    def wrapper(self, path: Path) -> Path:
        """A script that runs this perf_analyzer with its libraries (for tools that take a path)."""
        libs = os.pathsep.join(str(p) for p in self.library_path)
        return write_script(
            path,
            [
                _prepend_library_path(libs),
                f'exec {shlex.quote(str(self.binary))} "$@"',
            ],
        )


def ensure_perf_analyzer() -> PerfAnalyzer:
    """perf_analyzer from the tritonclient 2.41.0 wheel, installed once, checked every time."""
    ensure_apt(PERF_ANALYZER_APT)
    venv = ensure_venv("pa-venv", PERF_ANALYZER_REQUIREMENTS)
    binary = venv / "bin" / "perf_analyzer"
    if not binary.is_file():
        raise SetupError(f"{binary} is missing: the tritonclient wheel no longer carries perf_analyzer?")
    cudart = site_packages(venv) / "nvidia" / "cuda_runtime" / "lib"
    pa = PerfAnalyzer(binary, (cudart,))
    missing = [
        line.strip()
        for line in run_checked(["ldd", str(binary)], "ldd perf_analyzer", pa.env()).splitlines()
        if "not found" in line
    ]
    if missing:
        raise SetupError(f"perf_analyzer cannot load: {missing}")
    return pa


# ---------------------------------------------------------------- Model Analyzer


def ensure_model_analyzer() -> Path:
    """The ``model-analyzer`` command of triton-model-analyzer 1.58, in its own venv."""
    venv = ensure_venv("ma-venv", MODEL_ANALYZER_REQUIREMENTS)
    binary = venv / "bin" / "model-analyzer"
    if not binary.is_file():
        raise SetupError(f"{binary} is missing after installing {MODEL_ANALYZER_REQUIREMENTS[0]}")
    return binary


# ---------------------------------------------------------------- tritonserver


@dataclass(frozen=True)
class Tritonserver:
    binary: Path
    backend_dir: Path
    library_path: tuple[Path, ...]
    stub_bin: Path  # first on the server's PATH: the python whose packages the models import

    def wrapper(self, path: Path) -> Path:
        """A script that starts this tritonserver with every argument it is given."""
        libs = os.pathsep.join(str(p) for p in self.library_path)
        lines = [f'export PATH={shlex.quote(str(self.stub_bin))}:"$PATH"']
        if libs:
            lines.append(_prepend_library_path(libs))
        lines.append(
            f"exec {shlex.quote(str(self.binary))} "
            f'--backend-directory={shlex.quote(str(self.backend_dir))} "$@"'
        )
        return write_script(path, lines)


def find_tritonserver() -> Tritonserver:
    """The tritonserver autotune's local launcher would start (the pytriton wheel here)."""
    from autotune.errors import LaunchError
    from autotune.launch.local import find_installation

    try:
        inst = find_installation()
    except LaunchError as exc:
        raise SetupError(f"{exc} (run 'make install' first)") from exc
    return Tritonserver(inst.binary, inst.backend_dir, inst.library_path, Path(sys.executable).parent)


# ---------------------------------------------------------------- example models


def example_models(models: Sequence[str]) -> Path:
    """A repository of freshly built example models (original configs) in the cache."""
    repo = cache_dir() / "models"
    run_checked(
        [sys.executable, str(ROOT / "examples" / "build_models.py"), "--out", str(repo), "--models", *models],
        "examples/build_models.py",
    )
    return repo


def copy_model(source_repo: Path, model: str, target_repo: Path) -> Path:
    """Copy one model (config and version folders, no caches) into ``target_repo``."""
    target = target_repo / model
    shutil.copytree(source_repo / model, target, ignore=shutil.ignore_patterns("__pycache__", "*.stamp"))
    return target
