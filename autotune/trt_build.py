"""Serving a config that builds a TensorRT engine while it loads.

onnxruntime's TensorRT execution provider (and TensorFlow's TF-TRT) build their engine when
the model loads: minutes on a GPU, where any other model is ready in seconds. Such a config
gets ``build_timeout_s`` to get ready (``autotune run --trt-build-timeout-s``), not the
launcher's usual limit; and when it does not get ready, the trial's failure reason says so
plainly: the engine build did not finish within that time, or failed (the reason then ends
with TensorRT's own error, :func:`autotune.launch.failure_line`)::

    with serving(launcher, repository, model, log, config, build_timeout_s) as server:
        ...  # the model is ready; errors raised here are the caller's, never relabelled
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from autotune import model_config as mcfg
from autotune.errors import LaunchError, ModelNotReadyError
from autotune.launch import Launcher, Server, read_tail, tensorrt_error
from autotune.settings import TRT_BUILD_TIMEOUT_S

LOG_LINES = 200  # how far back a TensorRT error is looked for in the server log


def ready_timeout_s(config: mcfg.ModelConfig, usual_s: float, build_timeout_s: float) -> float:
    """How long ``config`` may take to get ready: ``build_timeout_s`` (at least ``usual_s``)
    when it asks for TensorRT, else ``usual_s``."""
    return max(usual_s, build_timeout_s) if mcfg.uses_tensorrt(config) else usual_s


@contextmanager
def serving(
    launcher: Launcher[Any],
    repository: Path,
    model: str,
    log: Path,
    config: mcfg.ModelConfig,
    build_timeout_s: float = TRT_BUILD_TIMEOUT_S,
) -> Iterator[Server]:
    """``launcher.serve``, with the time limit of :func:`ready_timeout_s`; for a TensorRT config,
    a failure to get ready is raised again as :func:`build_failure` says it."""
    timeout_s = ready_timeout_s(config, launcher.ready_timeout_s, build_timeout_s)
    with ExitStack() as stack:
        try:
            server = stack.enter_context(launcher.serve(repository, model, log, ready_timeout_s=timeout_s))
        except LaunchError as exc:
            if not mcfg.uses_tensorrt(config):
                raise
            raise build_failure(exc, timeout_s, read_tail(log, LOG_LINES)) from exc
        yield server  # only the readiness above is relabelled, not what the caller does with it


def build_failure(exc: LaunchError, timeout_s: float, log_text: str) -> LaunchError:
    """A TensorRT config's failure to get ready, said plainly: not ready in time is the engine
    build that did not finish; a server that exited or refused the config with a TensorRT error
    in its log (or in the refusal) is a build that failed; any other failure is ``exc`` itself
    (a missing file is not TensorRT's doing). The log tail ``exc`` carries stays below."""
    first, _, rest = str(exc).partition("\n")
    if isinstance(exc, ModelNotReadyError):
        limit = f"{timeout_s:.0f} s (--trt-build-timeout-s)"
        said = f"the TensorRT engine build did not finish within {limit}: {first}"
    elif tensorrt_error(log_text) or tensorrt_error(str(exc)):
        said = f"the TensorRT engine build failed: {first}"
    else:
        return exc
    return type(exc)(said + (f"\n{rest}" if rest else ""), hint=exc.hint)
