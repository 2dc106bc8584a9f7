"""The study: Optuna through ask/tell, the only module that imports optuna.

Two objectives (goodput up, per GPU used where the run's :class:`~autotune.objective.Scoring`
says so; latency at the SLA percentile down) with the SLA as a constraint the sampler uses
while it searches. Every asked trial is told: COMPLETE with its own measurement, FAIL with a
one-line reason and the server log's tail in user attributes, or PRUNED (not measured: another
trial stands in for it, or it lies outside the user's space) with its reason. The study is told
only what was measured for the trial itself: a pruned trial carries no values. Storage is any
Optuna RDB URL: SQLite in the run directory by default, PostgreSQL for several workers on one
study (None: in memory, for the simulator).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError
from autotune.objective import RAW, Scoring, Sla, scores
from autotune.points import Measurement, Point
from autotune.processes import Owner
from autotune.results import COMPLETE, FAIL, PRUNED, RUNNING, TrialResult, Verification
from autotune.search_space import Candidate, SearchSpace, params_of

DIRECTIONS: list[Any] = ["maximize", "minimize"]
# A RUNNING trial with no owner yet is being asked (optuna starts it before the owner can be
# written); one older than this was left by a tuner killed in that moment.
ASKING_S = 60.0
INTERRUPTED = "the tuner was stopped while this trial ran"  # the reason of every interrupted trial

optuna.logging.set_verbosity(logging.WARNING)


# Optuna >= 5 stores constraints on the trial (Trial.set_constraint); older ones ask a function.
_TRIAL_CONSTRAINTS = hasattr(optuna.Trial, "set_constraint")


def _constraints(trial: FrozenTrial) -> Sequence[float]:
    return [float(trial.user_attrs.get("constraint", 0.0))]


def _sampler(seed: int | None, startup_trials: int) -> optuna.samplers.BaseSampler:
    extra: dict[str, Any] = {} if _TRIAL_CONSTRAINTS else {"constraints_func": _constraints}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=startup_trials,
            multivariate=True,
            group=True,
            constant_liar=True,
            **extra,
        )


@dataclass
class Asked:
    """A trial in flight: its number, the candidate, whether it is the baseline, Optuna's handle."""

    number: int
    candidate: Candidate
    trial: optuna.Trial
    baseline: bool = False
    as_is: bool = False  # it runs a config the space does not hold (no params: see Study.enqueue)
    again_of: int | None = None  # the interrupted trial it measures again (Study.interrupted)

    def set(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Set user attributes on the trial; returns all this process set, ``attrs`` included."""
        for key, value in attrs.items():
            self.trial.set_user_attr(key, value)
        return {"candidate": _candidate_json(self.candidate), "baseline": self.baseline, **attrs}


class Study:
    def __init__(
        self, study: optuna.Study, space: SearchSpace, sla: Sla, created: bool = False, scoring: Scoring = RAW
    ) -> None:
        self._study, self.space, self.sla, self.scoring = study, space, sla, scoring
        self.created = created  # this process made the study (so it queues the baseline and seeds)
        self._first: list[_Again] = []  # interrupted trials this process measures again first

    @classmethod
    def open(
        cls,
        storage: str | None,
        name: str,
        space: SearchSpace,
        sla: Sla,
        *,
        seed: int | None = None,
        startup_trials: int = 6,
        scoring: Scoring = RAW,
    ) -> Study:
        sampler = _sampler(seed, startup_trials)
        store = storage if storage is not None else optuna.storages.InMemoryStorage()
        created = False
        for attempt in range(3):  # workers starting together race to create the study
            try:
                try:
                    study = optuna.create_study(
                        storage=store, study_name=name, directions=list(DIRECTIONS), sampler=sampler
                    )
                    created = True
                except optuna.exceptions.DuplicatedStudyError:
                    study = optuna.load_study(storage=store, study_name=name, sampler=sampler)
                break
            except Exception as exc:  # optuna/sqlalchemy raise many kinds here
                if attempt == 2 or isinstance(exc, ImportError):
                    where = redact(storage) if storage else "memory"
                    raise StudyError(f"cannot open study {name!r} at {where}: {exc}") from exc
                time.sleep(0.5 + attempt)
        return cls(study, space, sla, created, scoring)

    # ------------------------------------------------------------ asking and telling

    def enqueue(
        self,
        params: dict[str, Any],
        baseline: bool = False,
        again: bool = False,
        as_is: Candidate | None = None,
    ) -> None:
        """Queue params for the next ask (only those the candidate they make uses: the space
        asks for the others only where they apply); ``again`` re-queues a candidate tried before;
        ``as_is``: the candidate the trial runs instead, one the space does not hold (your config,
        outside your search space or asking for a GPU this machine lacks): the trial then has no
        params at all, so the sampler never takes its figures for a config of the space."""
        attrs: dict[str, Any] = {"baseline": True} if baseline else {}
        if as_is is not None and not self.space.holds(as_is):
            attrs["as_is"] = _candidate_json(as_is)
            self._study.enqueue_trial({}, user_attrs=attrs, skip_if_exists=False)
            return
        used = params_of(self.space.suggest(_Queued(params)))
        self._study.enqueue_trial(used, user_attrs=attrs, skip_if_exists=not again)

    def queued(self) -> bool:
        """Whether a trial is queued (:meth:`enqueue`) and not yet asked for."""
        return bool(self._study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))

    def ask(self) -> Asked:
        """The next trial: an interrupted one to measure again (:meth:`interrupted`), else the
        first queued, else the sampler's."""
        again = self._ask_again()
        trial = again[1] if again else self._study.ask()
        if "as_is" in trial.user_attrs:  # no params: see enqueue
            candidate = candidate_from_json(trial.user_attrs["as_is"])
        else:
            candidate = self.space.suggest(trial)
        trial.set_user_attr("candidate", _candidate_json(candidate))
        trial.set_user_attr("worker", Owner.current().text())
        baseline, as_is = bool(trial.user_attrs.get("baseline")), "as_is" in trial.user_attrs
        return Asked(trial.number, candidate, trial, baseline, as_is, again[0] if again else None)

    def tell_measured(self, asked: Asked, measurement: Measurement, duration_s: float) -> TrialResult:
        """Tell the study what the trial measured; the trial's result, as :meth:`results` reads it."""
        point = measurement.closest(self.sla)
        violation = 0.0 if measurement.feasible else self.sla.violation(point)
        attrs: dict[str, Any] = {
            "measurement": _measurement_json(measurement),
            "constraint": violation,
            "duration_s": round(duration_s, 3),
        }
        told = asked.set(attrs)
        if _TRIAL_CONSTRAINTS:
            asked.trial.set_constraint("sla", violation)
        share = self.scoring.share(asked.candidate)  # per GPU: what the objective divides by
        self._study.tell(asked.trial, list(scores(point, self.sla, share)))
        return _result_of(asked, COMPLETE, told)

    def tell_pruned(
        self, asked: Asked, reason: str, source: int | None = None, in_flight: bool = False
    ) -> TrialResult:
        """Tell the study the trial was not measured, for ``reason``; ``source``: the trial that
        stands in for it (the same config measured before, or one that settles it: see
        :func:`autotune.search.walk.stand_in`; ``in_flight``: it was still being measured). Optuna
        gets no values: the sampler counts a pruned trial among the worse ones, and never another
        trial's figures as this config's."""
        attrs: dict[str, Any] = {"reason": reason[:500], "duration_s": 0.0}
        if source is not None:
            attrs["reused_from"] = source
        if in_flight:
            attrs["twin_in_flight"] = True
        told = asked.set(attrs)
        self._study.tell(asked.trial, state=TrialState.PRUNED)
        return _result_of(asked, PRUNED, told)

    def tell_interrupted(self, asked: Asked, duration_s: float = 0.0) -> TrialResult:
        """Tell the study a stop ended the trial before it was measured: ``--resume`` (or the
        next worker) measures it again."""
        return self.tell_failed(asked, INTERRUPTED, "", duration_s, interrupted=True)

    def tell_failed(
        self,
        asked: Asked,
        reason: str,
        log_tail: str,
        duration_s: float,
        *,
        interrupted: bool = False,
        wrong_outputs: bool = False,
    ) -> TrialResult:
        """Tell the study the trial failed: ``interrupted`` when a stop request ended it (it is
        measured again on --resume), else for ``reason`` (it is not: it would fail again);
        ``wrong_outputs``: its answers differed from your config's (autotune.outputs)."""
        attrs: dict[str, Any] = {
            "reason": reason[:500],
            "log_tail": log_tail[-4000:],
            "duration_s": round(duration_s, 3),
        }
        if interrupted:
            attrs["interrupted"] = True
        if wrong_outputs:
            attrs["output_check"] = "differs"
        told = asked.set(attrs)
        self._study.tell(asked.trial, state=TrialState.FAIL)
        return _result_of(asked, FAIL, told)

    def interrupted(self) -> list[tuple[dict[str, Any], bool]]:
        """Trials a stopped tuner left behind (RUNNING after kill -9, FAIL and interrupted after
        Ctrl-C): the RUNNING ones are told FAIL. Each one's params, and whether it was the
        baseline, are returned, and this process's next asks measure them again (a trial run
        as it is, without params, as it is again: see :meth:`enqueue`), before anything queued
        (a trial is measured again once: the one that asks it marks it)."""
        for trial in self._study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = Owner.parse(str(trial.user_attrs.get("worker", "")))
            if owner is not None and not owner.is_me() and not owner.gone():
                continue  # another worker of this study is measuring it right now
            if owner is None and _age_s(trial) < ASKING_S:
                continue  # another worker is asking it: its owner is written a moment after
            self._study._storage.set_trial_user_attr(trial._trial_id, "reason", INTERRUPTED)
            self._study._storage.set_trial_user_attr(trial._trial_id, "interrupted", True)
            self._study.tell(trial.number, state=TrialState.FAIL)
        done = set(self.attr("requeued", []))
        found = [
            t
            for t in self._study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if t.user_attrs.get("interrupted")
            and t.number not in done
            and (t.params or "as_is" in t.user_attrs)
        ]
        self._first = [
            _Again(t.number, dict(t.params), bool(t.user_attrs.get("baseline")), t.user_attrs.get("as_is"))
            for t in found
        ]
        return [(again.params, again.baseline) for again in self._first]

    def again(self, asked: Asked) -> None:
        """Measure ``asked``'s config again at this process's next ask: its trial failed for
        no fault of the config's (a node that could not serve it, :mod:`autotune.fleet`)."""
        trial = asked.trial
        as_is = trial.user_attrs.get("as_is")
        self._first.append(_Again(asked.number, dict(trial.params), asked.baseline, as_is))

    def _ask_again(self) -> tuple[int, optuna.Trial] | None:
        """The next interrupted trial (:meth:`interrupted`): its number, and a new trial that
        measures it again (marked so); None when none is left."""
        while self._first:
            again = self._first.pop(0)
            done = set(self.attr("requeued", []))
            if again.number in done:
                continue  # another worker took it
            self.set_attr("requeued", sorted(done | {again.number}))
            attrs: dict[str, Any] = {"baseline": True} if again.baseline else {}
            used: dict[str, Any] = {}
            if again.as_is is not None:
                attrs["as_is"] = again.as_is
            else:
                used = params_of(self.space.suggest(_Queued(again.params)))
            template = optuna.trial.create_trial(
                state=TrialState.RUNNING, system_attrs={"fixed_params": used}, user_attrs=attrs
            )
            trial_id = self._study._storage.create_new_trial(self._study._study_id, template_trial=template)
            return again.number, optuna.Trial(self._study, trial_id)
        return None

    # ------------------------------------------------------------ reading

    def results(self) -> list[TrialResult]:
        """Every trial asked so far (queued ones that no worker asked yet are not trials)."""
        asked = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED, TrialState.RUNNING)
        return [_result(t) for t in self._study.get_trials(deepcopy=False, states=asked)]

    def told_values(self) -> dict[int, list[float] | None]:
        """Each trial's values as Optuna holds them (None: told none), by trial number."""
        return {t.number: t.values for t in self._study.get_trials(deepcopy=False)}

    def verifications(self) -> list[Verification]:
        """The finalists verified so far, by any worker of the study (one server each: a
        finalist another worker verified is not verified again)."""
        return [Verification.from_json(v) for v in self.attr("verifications", [])]

    def record_verifications(self, verifications: Sequence[Verification]) -> None:
        self.set_attr("verifications", [v.to_json() for v in verifications])

    def set_attr(self, key: str, value: Any) -> None:
        self._study.set_user_attr(key, value)

    def attr(self, key: str, default: Any = None) -> Any:
        return self._study.user_attrs.get(key, default)


@dataclass(frozen=True)
class _Again:
    """An interrupted trial to measure again: its number, params, whether it was the baseline."""

    number: int
    params: dict[str, Any]
    baseline: bool
    as_is: dict[str, Any] | None = None  # the candidate it ran as it is (JSON), without params


class _Queued:
    """Answers :meth:`SearchSpace.suggest` from params being queued; a dimension they lack gets
    its first choice (params of a trial a run made before the dimension existed, such as
    ``trt_workspace_mb``, re-queued on --resume)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self.params.get(name, choices[0])


def redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def _candidate_json(candidate: Candidate) -> dict[str, Any]:
    data = asdict(candidate)
    data["gpus"] = list(candidate.gpus)
    data["preferred_batch_sizes"] = list(candidate.preferred_batch_sizes)
    return data


def candidate_from_json(data: dict[str, Any]) -> Candidate:
    """:func:`_candidate_json` read back; a field it lacks (a run file written before the field
    existed, such as ``trt_workspace_mb``) takes the field's default."""
    return Candidate(
        **{**data, "gpus": tuple(data["gpus"]), "preferred_batch_sizes": tuple(data["preferred_batch_sizes"])}
    )


def _measurement_json(measurement: Measurement) -> dict[str, Any]:
    best = measurement.points.index(measurement.best) if measurement.best else None
    return {
        "points": [p.to_dict() for p in measurement.points],
        "best": best,
        "pruned": measurement.pruned,
        "output_check": measurement.output_check,
        "output_check_s": round(measurement.output_check_s, 3),
        "ready_s": round(measurement.ready_s, 3),
    }


def measurement_from_json(data: dict[str, Any]) -> Measurement:
    points = tuple(Point.from_dict(p) for p in data["points"])
    best = data.get("best")
    chosen = points[best] if best is not None else None
    pruned, check = bool(data.get("pruned", False)), str(data.get("output_check", ""))
    check_s, ready_s = float(data.get("output_check_s", 0.0)), float(data.get("ready_s", 0.0))
    return Measurement(points, chosen, pruned, check, check_s, ready_s)


def _age_s(trial: FrozenTrial) -> float:
    start = trial.datetime_start
    return (datetime.now() - start).total_seconds() if start is not None else float("inf")


def _result(trial: FrozenTrial) -> TrialResult:
    state = {TrialState.COMPLETE: COMPLETE, TrialState.FAIL: FAIL, TrialState.PRUNED: PRUNED}.get(
        trial.state, RUNNING
    )
    return _from_attrs(trial.number, state, dict(trial.params), trial.user_attrs)


def _result_of(asked: Asked, state: str, attrs: dict[str, Any]) -> TrialResult:
    """The result of a trial just told, from what this process set on it (not read back)."""
    return _from_attrs(asked.number, state, dict(asked.trial.params), attrs)


def _from_attrs(number: int, state: str, params: dict[str, Any], attrs: dict[str, Any]) -> TrialResult:
    measurement = attrs.get("measurement")
    candidate = attrs.get("candidate")
    return TrialResult(
        number=number,
        state=state,
        candidate=candidate_from_json(candidate) if candidate else None,
        params=params,
        baseline=bool(attrs.get("baseline")),
        measurement=measurement_from_json(measurement) if measurement else None,
        reason=str(attrs.get("reason", "")),
        log_tail=str(attrs.get("log_tail", "")),
        duration_s=float(attrs.get("duration_s", 0.0)),
        reused_from=attrs.get("reused_from"),
        interrupted=bool(attrs.get("interrupted")),
        wrong_outputs=attrs.get("output_check") == "differs",
        node=str(attrs.get("node", "")),
        twin_in_flight=bool(attrs.get("twin_in_flight")),
    )
