"""benchmarks/survey.py on a real tritonserver: the toy model surveyed, read back as a surface."""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune import sim
from autotune.model_config import candidate_of, load_config
from autotune.search_space import load_search_space
from tests.conftest import staged_servers

pytestmark = pytest.mark.integration


def _survey_main() -> Callable[[list[str]], int]:
    import survey

    return survey.main


def test_a_survey_measures_every_config_at_every_level_and_resumes(
    toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    out = tmp_path / "toy.json.gz"
    argv = ["--model", "toy", "--model-repository", str(toy_repo), "--sla-p95-ms", "60",
            "--search-space", str(small_space), "--levels", "1", "4", "--windows", "3",
            "--out", str(out)]  # fmt: skip
    main = _survey_main()
    assert main([*argv, "--configs", "1"]) == 0  # stopped after one config: resumed below
    assert len(sim.Surveyed.load(out).windows) == 1
    assert main(argv) == 0
    surface = sim.Surveyed.load(out)
    space = load_search_space(small_space)
    configs = sim.candidates(space)
    # it records what the simulator tunes it in, and from: this space and toy's own config
    assert sim.space_of(surface).instance_count == space.instance_count and surface.gpus == 0
    assert surface.baseline == candidate_of(load_config(toy_repo, "toy"))
    # and how long each server took to start: the simulator's servers start in their median
    starts = json.loads(gzip.decompress(out.read_bytes()))["starts_s"]
    assert len(starts) == len(sim.candidates(load_search_space(small_space))) and min(starts) > 0
    assert surface.start_s == statistics.median(starts)
    assert len(configs) >= 3 and set(surface.windows) == {sim.survey_label(c) for c in configs}
    for config in configs:
        levels = surface.windows[sim.survey_label(config)]
        assert set(levels) == {1, 4} and all(len(pairs) == 3 for pairs in levels.values())
        # the survey loaded each level as asked: by Little's law a level's requests in flight
        # (throughput times latency) are its clients, so 4's read nearer 4x 1's than 1x (one
        # instance without batching is saturated at 1 client: its throughput need not grow)
        one, four = surface.truth(config, 1), surface.truth(config, 4)
        assert one.throughput > 0 and four.throughput > 0
        assert four.throughput * four.p95_ms > 2 * one.throughput * one.p95_ms
    # read again on another server, into the same file (stopped after one config here)
    assert main([*argv, "--server", "2", "--configs", "1"]) == 0
    again = sim.Surveyed.load(out)
    assert len(again.again) == 1 and len(again.again[0]) == 1 and again.missing(space) == 0
    assert again.windows == surface.windows  # the first reading kept as it was
    with pytest.raises(SystemExit) as refused:  # nothing to read again
        main([*argv, "--server", "2", "--out", str(tmp_path / "none.json.gz")])
    assert refused.value.code == 2 and not (tmp_path / "none.json.gz").exists()
    assert staged_servers() == []
