"""A pipeline: an ensemble's composing models, or a BLS model's (``--composing-models``).

:func:`read_pipeline` reads one from the model repository and checks it as Triton would before
any server starts, each problem one line (a :class:`~autotune.errors.ConfigError`, exit 2):

- an ensemble step names a model that is not in the repository, or the ensemble itself;
- a step maps a tensor its model does not have, or feeds it a tensor of another data type than
  the tensor's producer (an ensemble input or an earlier step's output) gives;
- a step consumes a tensor that no ensemble input and no step produces, or two steps produce
  the same tensor;
- the steps form a cycle (a step needs, through other steps, its own output);
- a composing model's ``max_batch_size`` is below the ensemble's (Triton refuses to load it);
- a ``--composing-models`` name is not in the repository.

The members come in the order data flows through them (the steps' topological order), each once.
:func:`for_step` is what ``autotune run --model ENSEMBLE --step STEP`` checks: the run tunes that
step's config, the ensemble and its other steps served as they are, every point measured
through the ensemble.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from autotune import model_config as mcfg
from autotune.errors import ConfigError, ModelNotFoundError, UsageError
from autotune.files import file_digest

ENSEMBLE = "ensemble"
BLS = "bls"


@dataclass(frozen=True)
class Step:
    """One ensemble step: its model, and its tensors as the ensemble names them."""

    model: str
    consumes: tuple[str, ...]
    produces: tuple[str, ...]


@dataclass(frozen=True)
class Pipeline:
    """A model that serves through others: ``kind`` is :data:`ENSEMBLE` or :data:`BLS`;
    ``members`` its composing models, in the order data flows (a BLS model's as given)."""

    model: str
    kind: str
    members: tuple[str, ...]
    steps: tuple[Step, ...] = ()

    @property
    def models(self) -> tuple[str, ...]:
        """Every model it serves: itself and its members."""
        return (self.model, *self.members)


@dataclass(frozen=True)
class TunedStep:
    """A model an earlier round of the run tuned (a pipeline's step, or a model served beside
    another): served with its winner by the rounds after it, and written back with the last
    round's winner (``autotune apply``)."""

    model: str
    config: str  # the winner's config.pbtxt text
    digest: str  # the repository's config.pbtxt's sha256 as that round began: apply refuses it changed
    run: str  # the round's run directory

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TunedStep:
        return cls(str(data["model"]), str(data["config"]), str(data["digest"]), str(data["run"]))


def is_ensemble(config: mcfg.ModelConfig) -> bool:
    return config.platform == ENSEMBLE


def read_pipeline(repository: Path, model: str, composing: Sequence[str] = ()) -> Pipeline | None:
    """``model``'s pipeline (None: a model that serves alone), checked (see the module)."""
    config = mcfg.load_config(repository, model)
    if is_ensemble(config):
        if composing:
            raise ConfigError(
                f"--composing-models is for a BLS model; {model!r} is an ensemble, whose steps name "
                "its composing models"
            )
        return _ensemble(repository, config)
    if not composing:
        return None
    for name in composing:
        if name == model:
            raise ConfigError(f"--composing-models names {model!r} itself")
        _member(repository, model, name, "--composing-models names")
    return Pipeline(model, BLS, tuple(dict.fromkeys(composing)))


def for_step(
    repository: Path, config: mcfg.ModelConfig, step: str, composing: Sequence[str] = ()
) -> Pipeline | None:
    """The pipeline a run tunes a step of (``config``: the ``--model``'s; ``step``: ``--step``;
    ``composing``: ``--composing-models``), checked; None for a model served alone. An ensemble
    needs a ``step`` among its members; a BLS model's step is one of ``composing`` or, by
    default, the model itself. A UsageError (one line) otherwise."""
    name = config.name
    found = read_pipeline(repository, name, composing)
    if found is None:
        if step:
            raise UsageError(
                f"--step {step!r}: model {name!r} is not an ensemble (--step names an ensemble's step, "
                "or with --composing-models a model a BLS model calls)"
            )
        return None
    flow = " -> ".join(found.members)
    if found.kind == ENSEMBLE and not step:
        raise UsageError(
            f"model {name!r} is an ensemble ({flow}): give the step to tune with --step STEP, measured "
            "end to end through it (autotune run without --step tunes its steps in rounds)"
        )
    if step and step not in found.members and not (found.kind == BLS and step == name):
        what = (
            f"a step of ensemble {name!r} ({flow})"
            if found.kind == ENSEMBLE
            else f"{name!r} or one of {flow}"
        )
        raise UsageError(f"--step {step!r} is not {what}")
    return found


def tuned_configs(tuned: Sequence[TunedStep]) -> dict[str, mcfg.ModelConfig]:
    """The configs earlier rounds chose for their steps, by model: served in place of the
    repository's (:func:`autotune.staging.stage_members`)."""
    return {t.model: mcfg.parse_config(t.config, f"{t.run} ({t.model})") for t in tuned}


def caller_served(caller: mcfg.ModelConfig, members: Sequence[mcfg.ModelConfig]) -> mcfg.ModelConfig:
    """A BLS model's config as it is served while a model it calls is tuned: an instance of it
    holds a request until every call it makes returns, so it runs at least as many instances as
    any model it calls (its count raised to that; ``caller`` itself when it has them)."""

    def total(config: mcfg.ModelConfig) -> int:
        count, _, gpus = mcfg.instances_of(config)
        return count * max(1, len(gpus))

    need = max((total(m) for m in members), default=1)
    if total(caller) >= need:
        return caller
    own = mcfg.candidate_of(caller)
    return mcfg.apply_candidate(caller, replace(own, instance_count=-(-need // max(1, len(own.gpus)))))


def caller_digest(found: Pipeline | None, tuned: str, repository: Path) -> str:
    """A BLS round tuning ``tuned``, a model the BLS model calls: the BLS model's config.pbtxt's
    sha256 (its instances follow: :func:`caller_served`; apply refuses it changed since);
    otherwise ""."""
    if found is None or found.kind != BLS or tuned == found.model:
        return ""
    return file_digest(mcfg.model_dir(repository, found.model) / mcfg.CONFIG_NAME)


def with_caller(
    found: Pipeline, repository: Path, configs: Mapping[str, mcfg.ModelConfig]
) -> dict[str, mcfg.ModelConfig]:
    """``configs`` (by model, served in place of the repository's) and, for a BLS model while a
    model it calls is tuned, the BLS model's config as :func:`caller_served` serves it beside
    theirs (where it differs from its own: tuned in ``configs``, else the repository's)."""
    out = dict(configs)
    if found.kind != BLS:
        return out
    caller = out.get(found.model) or mcfg.load_config(repository, found.model)
    members = [out.get(m) or mcfg.load_config(repository, m) for m in found.members]
    served = caller_served(caller, members)
    if served is not caller:
        out[found.model] = served
    return out


def describe(found: Pipeline, tuned: str) -> str:
    """``step slow of ensemble pipe (toy -> slow)``, ``caller calling slow (BLS)``: what the run tunes."""
    flow = " -> ".join(found.members)
    if found.kind == ENSEMBLE:
        return f"step {tuned} of ensemble {found.model} ({flow})"
    if tuned == found.model:
        return f"{tuned} calling {', '.join(found.members)} (BLS)"
    return f"{tuned}, called by {found.model} (BLS, calling {', '.join(found.members)})"


def _member(repository: Path, model: str, name: str, where: str) -> mcfg.ModelConfig:
    try:
        return mcfg.load_config(repository, name)
    except ModelNotFoundError as exc:
        raise ConfigError(f"{model}: {where} {name!r}, which is not in {repository}") from exc


def _ensemble(repository: Path, config: mcfg.ModelConfig) -> Pipeline:
    name = config.name
    if not config.ensemble_scheduling.step:
        raise ConfigError(f"{name}: an ensemble without steps (ensemble_scheduling.step)")
    produced: dict[str, tuple[int, str]] = {
        t.name: (t.data_type, "the ensemble's input") for t in config.input
    }
    steps: list[Step] = []
    members: dict[str, mcfg.ModelConfig] = {}
    for i, step in enumerate(config.ensemble_scheduling.step, 1):
        where = f"step {i} ({step.model_name})"
        if step.model_name == name:
            raise ConfigError(f"{name}: {where} names the ensemble itself: a cycle")
        member = members.get(step.model_name) or _member(repository, name, step.model_name, f"step {i} names")
        members[step.model_name] = member
        inputs = {t.name: t.data_type for t in member.input}
        outputs = {t.name: t.data_type for t in member.output}
        for own in step.input_map:
            if inputs and own not in inputs:
                raise ConfigError(
                    f"{name}: {where} maps input {own!r}, which {step.model_name} does not have"
                )
        for own, tensor in step.output_map.items():
            if outputs and own not in outputs:
                raise ConfigError(
                    f"{name}: {where} maps output {own!r}, which {step.model_name} does not have"
                )
            if tensor in produced:
                raise ConfigError(
                    f"{name}: {where} produces {tensor!r}, which {produced[tensor][1]} produces too"
                )
            produced[tensor] = (outputs.get(own, 0), where)
        steps.append(Step(step.model_name, tuple(step.input_map.values()), tuple(step.output_map.values())))
    for i, (made, proto) in enumerate(zip(steps, config.ensemble_scheduling.step, strict=True), 1):
        inputs = {t.name: t.data_type for t in members[made.model].input}
        for own, tensor in proto.input_map.items():
            if tensor not in produced:
                raise ConfigError(
                    f"{name}: step {i} ({made.model}) consumes {tensor!r}, which no ensemble input "
                    "or step produces"
                )
            given, source = produced[tensor]
            wanted = inputs.get(own, 0)
            if given and wanted and given != wanted:
                raise ConfigError(
                    f"{name}: step {i} ({made.model}) takes {own!r} as {mcfg.data_type_name(wanted)}, "
                    f"but {tensor!r} from {source} is {mcfg.data_type_name(given)}"
                )
    order = _flow(name, steps, {t.name for t in config.input})
    for member_name in order:
        member = members[member_name]
        if config.max_batch_size > 0 and member.max_batch_size < config.max_batch_size:
            raise ConfigError(
                f"{name}: max_batch_size {config.max_batch_size}, but its step {member_name} has "
                f"{member.max_batch_size}: Triton loads an ensemble only within every step's"
            )
    return Pipeline(name, ENSEMBLE, order, tuple(steps))


def _flow(name: str, steps: Sequence[Step], given: set[str]) -> tuple[str, ...]:
    """The steps' models in the order data flows (each once); a ConfigError on a cycle."""
    ready = set(given)
    left = list(steps)
    order: list[str] = []
    while left:
        runnable = [s for s in left if all(t in ready for t in s.consumes)]
        if not runnable:
            stuck = ", ".join(s.model for s in left)
            raise ConfigError(f"{name}: its steps form a cycle ({stuck} each wait for another's output)")
        for step in runnable:
            left.remove(step)
            ready.update(step.produces)
            if step.model not in order:
                order.append(step.model)
    return tuple(order)
