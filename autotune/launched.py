"""Real servers for a run's trials (:class:`LaunchedServers`). Each candidate is staged beside
your model's files and served by the run's launcher, and the run's own load measures it. It
implements :class:`autotune.serving.Servers`."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from autotune import model_config as mcfg
from autotune import openfiles, trt_build, warmup
from autotune.gpu import GpuProbe
from autotune.gpu_probe import at_server, choose_probe
from autotune.launch import Launcher, Server
from autotune.loadgen import Beside, LoadGenerator, WorkloadData
from autotune.pipeline import tuned_configs, with_caller
from autotune.points import WindowPlan
from autotune.prepare import Prepared
from autotune.search_space import Candidate
from autotune.staging import Stages, can_warm, stage_members, stage_model


class LaunchedServers:
    """The run's servers. ``launcher`` starts them, and their models are staged under the stages
    of run ``run_id``."""

    def __init__(self, prep: Prepared, launcher: Launcher[Any], run_id: str) -> None:
        self.prep, self.launcher, self.run_id = prep, launcher, run_id
        # the requests for each served name: the tuned model's, and those of the models serve_all staged
        self._data: dict[str, WorkloadData | None] = {prep.settings.model: prep.data}
        self.checked = False  # the preflight passed
        self._beside_checked = False  # the models beside it passed theirs
        self.warm = True  # whether staged configs get our warm-up; off once it kept your config from loading
        self.version = ""  # the server's version, from the first that answered
        self.probe: GpuProbe | None = None  # how points sample the server's GPUs, chosen on the first server
        self.probed = False
        self._stages: Stages | None = None  # made on the first serve, removed by close

    @contextmanager
    def serve(self, candidate: Candidate, log: Path, stage_name: str) -> Iterator[Server]:
        """A server of ``candidate``, staged by :func:`autotune.staging.stage_model` and served
        by the launcher.

        With ``--step``, the candidate is staged beside the ensemble and its other steps. They
        are as they are, or have the configs that earlier rounds chose for them. A BLS model
        gets :func:`autotune.pipeline.caller_served`'s instances. A config with TensorRT gets
        ``--trt-build-timeout-s`` to build its engine. The staged folder is removed when the
        server's context ends."""
        config, files = self.warmed(mcfg.apply_candidate(self.prep.original, candidate))
        with self._stage(stage_name) as stage:
            stage_model(self.prep.model_dir, config, stage, files)
            s = self.prep.settings
            models = self.prep.pipeline.models if self.prep.pipeline else ()
            others = [name for name in models if name != config.name] + [c.model for c in s.beside]
            # The ensemble and its other steps are served as they are, or as earlier rounds tuned
            # them. A BLS model that calls the tuned one gets at least as many instances as it.
            served = tuned_configs(s.tuned_steps)
            pipeline = self.prep.pipeline
            if pipeline is not None and config.name != pipeline.model:
                served = with_caller(pipeline, s.repository, {**served, config.name: config})
            stage_members(s.repository, others, stage, served)
            with trt_build.serving(self.launcher, stage, s.model, log, config, s.trt_build_timeout_s) as srv:
                yield srv

    def can_share(self) -> bool:
        """Whether one server can serve several candidates (:meth:`serve_all`). It can when the
        launcher starts its own servers and the tuned model is served alone, with no pipeline and
        no models beside it."""
        return self.launcher.starts_servers and self.prep.pipeline is None and not self.prep.settings.beside

    @contextmanager
    def serve_all(self, candidates: Mapping[str, Candidate], log: Path, stage_name: str) -> Iterator[Server]:
        """One server of all ``candidates``, each staged as a model of its own named by its key.
        :meth:`can_share` says when this works. The staged folder is removed when the server's
        context ends."""
        with self._stage(stage_name) as stage:
            configs = []
            for name, candidate in candidates.items():
                config, files = self.warmed(mcfg.apply_candidate(self.prep.original, candidate))
                config.name = name
                stage_model(self.prep.model_dir, config, stage, files)
                configs.append(config)
            built = [c for c in configs if mcfg.uses_tensorrt(c)]
            timeout = self.prep.settings.trt_build_timeout_s
            with trt_build.serving(
                self.launcher, stage, configs[-1].name, log, (built or configs)[0], timeout
            ) as srv:
                yield srv

    def generator(self, server: Server, plan: WindowPlan, model: str = "") -> LoadGenerator:
        """The load for this server. ``model`` is a name :meth:`serve_all` staged; empty means
        the tuned model.

        The first server that answers also gets the preflight (LoadGenerator.preflight). The
        preflight sends each distinct shape of the workload, then a spread of its requests. A
        WorkloadError stops the run. The first server also chooses the run's GPU probe. Without a
        probe, GPUs are not sampled. The probe then reads each server at its own metrics
        (:func:`autotune.gpu_probe.at_server`)."""
        settings = self.prep.settings
        if server.pid and self.prep.clients:  # a server of ours must take the run's clients
            openfiles.check_server(server.pid, self.prep.clients, server.description)
        name = model or settings.model
        data = self._data[name] if name in self._data else self._data[settings.model]
        gen = LoadGenerator.connect(
            server.host, server.http_port, server.grpc_port, name, protocol=settings.protocol,
            plan=plan, workload=settings.workload, data=data, preflight=not self.checked,
        )  # fmt: skip
        self._data[name], self.checked = gen.data, True  # as the server serves it, encoded once
        if not self.probed:
            self.probe, self.probed = choose_probe(server.metrics_url, settings.launch.kind), True
            self.version = triton_version(server.host, server.http_port)
        gen = gen.with_steps(self.prep.pipeline.members) if self.prep.pipeline else gen
        gen = gen.with_beside(self._beside(server, plan), settings.weight) if settings.beside else gen
        return gen.with_gpu_probe(at_server(self.probe, server.metrics_url))  # this server's metrics

    def _beside(self, server: Server, plan: WindowPlan) -> list[Beside]:
        """A load generator for each model served beside the tuned one. Each has its own
        workload, checked on the first server like the tuned model's. Each runs as many clients
        as the tuned one."""
        beside = []
        for co, data in zip(self.prep.settings.beside, self.prep.beside_data, strict=True):
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, co.model,
                protocol=self.prep.settings.protocol, plan=plan, workload=co.workload, data=data,
                preflight=not self._beside_checked,
            )  # fmt: skip
            share = co.sla.limit_ms / self.prep.settings.sla.limit_ms
            beside.append(Beside(gen, co.weight, co.sla.percentile, share))
        self._beside_checked = True
        return beside

    def warmed(self, config: mcfg.ModelConfig) -> tuple[mcfg.ModelConfig, dict[str, bytes]]:
        """``config`` with Triton's warm-up added, and the files the warm-up reads.

        The warm-up runs every instance at every batch size it can form, on the workload's first
        entry (:func:`autotune.warmup.samples`). ``config`` comes back as it is when the workload
        is not this model's own input (a pipeline's step), or when its folder has a ``warmup/`` of
        yours. It also comes back as it is on a server we do not start, because a remote server
        loads a config, not the files beside it."""
        data, s = self.prep.data, self.prep.settings
        ours = self.launcher.starts_servers
        if not self.warm or data is None or self.prep.pipeline is not None or not ours:
            return config, {}
        if not can_warm(self.prep.model_dir):
            return config, {}
        names = [spec.name for spec in data.io.inputs]
        return warmup.samples(config, data.entries[0], names, s.workload.batch_size)

    def close(self) -> None:
        """Remove the stages. Every server has already stopped, when its :meth:`Launcher.serve`
        block ended."""
        if self._stages is not None:
            self._stages.remove()

    @contextmanager
    def _stage(self, stage_name: str) -> Iterator[Path]:
        """A folder of the run's stages (:class:`autotune.staging.Stages`), removed when the
        context ends."""
        if self._stages is None:
            self._stages = Stages.for_run(self.run_id)
        stage = self._stages.path(stage_name)
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def triton_version(host: str, port: int) -> str:
    """The server's version, from its metadata (``GET /v2``). It is "" when the server does not
    answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v2", timeout=5) as reply:
            return str(json.loads(reply.read()).get("version", ""))
    except (OSError, ValueError):
        return ""
