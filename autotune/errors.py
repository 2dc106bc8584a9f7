"""Errors a person can act on.

Every error autotune raises on purpose is an :class:`AutotuneError`. Each class carries
an ``exit_code`` and a one-line ``hint``; ``cli.py`` is the only place that turns them
into process exit codes and printed lines. Foreign errors (grpc, docker, protobuf,
optuna, OS) are translated where they enter, with ``raise ... from exc``.

    AutotuneError                  exit 1
    ├── UsageError                 exit 2   bad input: nothing was written
    │   ├── ModelNotFoundError              unknown model / missing repository
    │   ├── ConfigError                     malformed or invalid config.pbtxt
    │   ├── SearchSpaceError                malformed search space file
    │   └── WorkloadError                   the model answered the input data with an error
    │                                       (the preflight; the run stops before measuring)
    ├── LaunchError                exit 3   a server could not be started or reached
    │   ├── ServerExitedError               tritonserver/container exited early
    │   ├── ModelNotReadyError              the model never became ready
    │   └── ControlError                    the server's control API refused or did not answer
    ├── MachineLimitError          exit 3   a limit of this machine (open files) stopped a trial:
    │                                       the run stops (not one candidate's failure)
    ├── YourConfigError            exit 3   your own config does not load here, for a reason no
    │                                       candidate changes: the run stops
    ├── RestoreError               exit 3   a remote server could not go back to its own config:
    │                                       the run stops (not one trial's failure)
    ├── MeasurementError           exit 4   the load generator could not measure; every trial failed
    │   └── WrongOutputError                a candidate answered differently from the original
    │                                       config (autotune.outputs): it is infeasible
    ├── StudyError                 exit 5   the study storage is unusable
    │   └── DiskFullError                   the disk of the run directory filled up: the run
    │                                       stopped, its trials and report kept (--resume)
    ├── WriteBackError             exit 6   the config could not be written back safely
    └── NoConfigMetError           exit 7   the run ended, measured, with no config that met the
                                            SLA: nothing to apply
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class: a message for people, an exit code and a hint."""

    exit_code = 1
    hint = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UsageError(AutotuneError):
    """Bad input from the user; nothing was started or written."""

    exit_code = 2
    hint = "see 'autotune --help'"


class ModelNotFoundError(UsageError):
    hint = "check --model and --model-repository"


class ConfigError(UsageError):
    hint = "fix the model's config.pbtxt (protobuf text format, model_config.proto)"


class SearchSpaceError(UsageError):
    hint = "see search_spaces/README.md for the format"


class WorkloadError(UsageError):
    """The model answered the workload's data with an error before anything was measured."""

    hint = "check --input-data, --shape and --batch-size against the model's inputs"


class LaunchError(AutotuneError):
    exit_code = 3
    hint = "look at the server log named above"


class ServerExitedError(LaunchError):
    """The server process or container ended before or while it was used."""


class ModelNotReadyError(LaunchError):
    """The server ran, but the model never reported ready."""


class ControlError(LaunchError):
    """The server's HTTP control API (health, metadata, statistics, repository) failed.

    ``status`` is the HTTP status when the server answered, None when nothing answered."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class MachineLimitError(AutotuneError):
    """A limit of the machine (the open-file limit) stopped a trial: no candidate can pass it."""

    exit_code = 3
    hint = "raise the limit named above"


class YourConfigError(AutotuneError):
    """Your own config did not load here: every candidate shares the reason (a missing module)."""

    exit_code = 3
    hint = "fix the model so your config loads (the server's line above), then run again"


class RestoreError(AutotuneError):
    """A remote server could not be put back on its own config after a trial."""

    exit_code = 3
    hint = "load the model on that server again by hand (its repository's config is unchanged)"


class MeasurementError(AutotuneError):
    exit_code = 4
    hint = "the server answered with errors; look at its log"


class WrongOutputError(MeasurementError):
    """A candidate's answers differ from the original config's on the same requests."""

    hint = "--output-tolerance loosens the check for floats; --output-check off skips it"


class StudyError(AutotuneError):
    exit_code = 5
    hint = "check the study storage URL / run directory"


class DiskFullError(StudyError):
    """The disk that holds the run directory (and its study) filled up during the run."""

    hint = "free space on that disk, then continue with the --resume line above"


class WriteBackError(AutotuneError):
    exit_code = 6
    hint = "the model repository was left unchanged unless the message says otherwise"


class NoConfigMetError(AutotuneError):
    """The run measured configs, and none met the SLA: it has nothing to apply."""

    exit_code = 7
    hint = "the report shows the closest configs"
