"""The measuring interface: what a run measures candidates on. A :class:`Servers` starts a fresh
server for one candidate or several, and hands out a :class:`Load` that measures points on it.

:class:`autotune.launched.LaunchedServers` starts real servers through a launcher (local, docker,
remote). :class:`autotune.sim.SimServers` simulates them on a response surface. The trials, the
race and the open-loop check (:mod:`autotune.trials`, :mod:`autotune.finals`) see only this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from autotune.model_config import ModelConfig
from autotune.points import Point, WindowPlan
from autotune.search_space import Candidate

S = TypeVar("S")


class Load(Protocol):
    """A load on one model of one server: each call measures one point."""

    def at_concurrency(self, concurrency: int) -> Point: ...

    def at_rate(self, rate: float, distribution: str = "constant") -> Point: ...

    def at_intervals(self, intervals_us: Sequence[int], rate: float | None = None) -> Point: ...

    def with_plan(self, plan: WindowPlan) -> Load:
        """The same load, its points measured by ``plan``."""
        ...

    def with_seed(self, seed: int) -> Load:
        """The same load, with an open loop's arrivals drawn from ``seed``."""
        ...

    def check_sample(self, workload: Any, seed: int, count: int) -> list[tuple[Any, str]]:
        """The output check's requests (:mod:`autotune.outputs`)."""
        ...

    def answers(self, payloads: Sequence[Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The server's answers to ``payloads``, and each output's data type."""
        ...


class Servers(Protocol[S]):
    """Fresh servers of candidates, and the load on them. ``S`` is the server's type."""

    warm: bool  # whether staged configs get our warm-up (autotune.warmup); off once it kept a server down
    version: str  # the server's version once a server has answered; "" before that, or when unknown

    def serve(self, candidate: Candidate, log: Path, stage_name: str) -> AbstractContextManager[S]:
        """A fresh server of ``candidate``, its log in ``log``; stopped when the context ends."""
        ...

    def serve_all(
        self, candidates: Mapping[str, Candidate], log: Path, stage_name: str
    ) -> AbstractContextManager[S]:
        """One fresh server of every candidate, each a model named by its key."""
        ...

    def can_share(self) -> bool:
        """Whether :meth:`serve_all` can serve several candidates at once."""
        ...

    def generator(self, server: S, plan: WindowPlan, model: str = "") -> Load:
        """The load on ``server``. ``model`` is a name :meth:`serve_all` served; empty means the
        tuned model."""
        ...

    def warmed(self, config: ModelConfig) -> tuple[ModelConfig, dict[str, bytes]]:
        """``config`` as it is served, with our warm-up when it gets one, and the files it reads."""
        ...

    def close(self) -> None:
        """Remove what serving left (every server has stopped when its context ended)."""
        ...
