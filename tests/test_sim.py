"""The simulator (autotune.sim): the tuner's decisions against response surfaces, no server.

Pure logic: the surfaces are fakes of a server by design, and what is checked is what the real
search, the real sampler and the real verification decide on them."""

from __future__ import annotations

import gzip
import json
import math
import random
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune import sim
from autotune.errors import LaunchError
from autotune.events import Events
from autotune.objective import Sla
from autotune.results import Verification
from autotune.search import walk
from autotune.search_space import Candidate
from autotune.settings import RunSettings
from autotune.traffic import check_rates
from autotune.trials import Trials
from tests.test_noise import windowed

SPACE = sim.default_space()
QUIET = sim.Synthetic("quiet", Sla(95, 12.0), mu=400.0, cores=2, alpha=0.4, cv=0.0)


def test_the_default_space_holds_136_distinct_servers() -> None:
    """4 instance counts x (one without batching, one batching to 1, and 4 max batch sizes x 2
    preferred x 4 delays)."""
    found = sim.candidates(SPACE)
    assert len(found) == 136 and len(set(found)) == 136
    assert all(SPACE.holds(c) for c in found)


def test_a_surface_has_a_knee_and_batching_pays_where_it_should() -> None:
    one = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)
    batching = replace(one, instance_count=2, dynamic_batching=True, max_batch_size=8)
    low, high = QUIET.truth(one, 1), QUIET.truth(one, 32)
    assert low.throughput < high.throughput < 1.05 * QUIET.truth(one, 16).throughput  # saturated
    assert high.p95_ms > 10 * low.p95_ms  # the queue grows past the knee
    assert QUIET.truth(batching, 32).throughput > 2 * high.throughput
    goodput, level = sim.true_goodput(QUIET, batching, SPACE)
    assert goodput > 0 and QUIET.truth(batching, level).p95_ms <= 12.0


def test_on_a_noise_free_surface_every_run_finds_the_best_and_tells_only_what_it_measured() -> None:
    best = max(sim.true_goodput(QUIET, c, SPACE)[0] for c in sim.candidates(SPACE))
    judged = [sim.judge(QUIET, SPACE, sim.simulate(QUIET, seed), best) for seed in range(5)]
    assert all(j.honest and j.meets and j.ratio >= 0.95 for j in judged), judged
    assert all(j.seen >= j.ratio for j in judged)  # the winner is among the configs measured
    assert all(0 < j.sim_s < 12 * 60 and j.trials >= 6 for j in judged)


class _Copying(Trials):
    """A search that reports the first trial's measurement for every later trial: each study is
    told the scores of the measurement stored with it, but not what its own servers read."""

    first: Any = None

    def measure(self, asked: Any, start: Any = None, beat: Any = None) -> Any:
        measured = super().measure(asked, start, beat)
        self.first = self.first or measured
        return self.first


def test_honest_fails_on_a_study_told_another_trials_figures() -> None:
    """``honest`` compares what each trial was told with the readings its own servers gave: a
    trial told another's figures fails it, though they are the measurement stored with it."""
    assert sim.simulate(QUIET, seed=1, max_trials=6, finalists=0).honest
    copied = sim.simulate(QUIET, seed=1, max_trials=6, finalists=0, trials_type=_Copying)
    stored = [r.measurement.points for r in copied.results if r.measurement is not None]
    assert len(stored) > 1 and all(points == stored[0] for points in stored)  # each the first's
    assert not copied.honest


def test_a_winner_is_judged_at_its_operating_point_against_the_best_at_the_searchs_limit() -> None:
    """``at_point``: the winner's true throughput where it is recommended over the best goodput at
    the search's limit; on a noise-free surface the recommendation stands within a level of it."""
    limit = QUIET.sla.tightened(0.10).limit_ms
    there = max(sim.true_goodput(QUIET, c, SPACE, limit)[0] for c in sim.candidates(SPACE))
    best = max(sim.true_goodput(QUIET, c, SPACE)[0] for c in sim.candidates(SPACE))
    outcome = sim.simulate(QUIET, 0)
    judged = sim.judge(QUIET, SPACE, outcome, best, (limit, there))
    assert judged.winner is not None and judged.level > 0
    assert judged.at_point == pytest.approx(QUIET.truth(judged.winner, judged.level).throughput / there)
    assert judged.at_point >= 0.9
    assert sim.judge(QUIET, SPACE, outcome, best).at_point == 0.0  # no limit asked for
    tally = sim.Tally([judged, replace(judged, at_point=0.94)])
    assert tally.good_at_point == 0.5


def test_a_winner_is_judged_as_a_client_that_reads_latency_higher_would_read_it() -> None:
    """``latency_share``: the operating point's true latency over the SLA's limit, so that
    ``meets_read_by(B)`` counts the runs a client reading latency B times ours finds meeting it."""
    best = max(sim.true_goodput(QUIET, c, SPACE)[0] for c in sim.candidates(SPACE))
    judged = sim.judge(QUIET, SPACE, sim.simulate(QUIET, 0), best)
    assert judged.winner is not None
    true = QUIET.truth(judged.winner, judged.level).latency_ms(QUIET.sla.percentile)
    assert judged.latency_share == pytest.approx(true / QUIET.sla.limit_ms)
    assert judged.meets == (true <= QUIET.sla.limit_ms)
    runs = [replace(judged, latency_share=x) for x in (0.80, 0.90, 0.99, 1.05, math.inf)]
    tally = sim.Tally(runs)
    assert tally.meets_read_by(1.0) == 0.6 and tally.meets_read_by(1.15) == 0.2
    assert tally.meets_read_by(1.3) == 0.0


def test_the_simulated_clock_is_what_servers_and_windows_take() -> None:
    outcome = sim.simulate(QUIET, seed=0, max_trials=3, finalists=0, open_loop_check=False)  # trials alone
    measured = [r for r in outcome.results if r.measurement is not None]
    windows = sum(p.windows for r in measured for p in r.measurement.points)  # type: ignore[union-attr]
    points = sum(len(r.measurement.points) for r in measured)  # type: ignore[union-attr]
    assert len(measured) == 3 and outcome.verifications == ()
    assert outcome.sim_s >= 3 * QUIET.start_s + windows * 0.5
    # and what a real run spends beyond them: each server's own, each point's
    bare = sim.simulate(
        QUIET, seed=0, max_trials=3, finalists=0, open_loop_check=False, overheads=sim.Overheads(0.0, 0.0)
    )
    spent = sim.Overheads()
    assert outcome.sim_s - bare.sim_s == pytest.approx(3 * spent.server_s + points * spent.point_s)


class _OneServer:
    """A closed loop on one server that serves a request in an exponential time of mean 1/mu:
    n clients' requests each wait out n services (an Erlang latency)."""

    mu = 100.0

    def truth(self, candidate: Candidate, level: int) -> sim.Reading:
        def erlang(q: float) -> float:
            low, high = 0.0, 10 * (level + 5) / self.mu
            for _ in range(60):
                x = self.mu * (low + high) / 2  # services done by then: Poisson, fewer than n
                below = 1 - sum(math.exp(k * math.log(x) - x - math.lgamma(k + 1)) for k in range(level))
                low, high = ((low + high) / 2, high) if below < q else (low, (low + high) / 2)
            return high * 1000

        return sim.Reading(self.mu, *(erlang(q) for q in (0.5, 0.9, 0.95, 0.99)))


def test_an_open_loop_is_the_closed_loops_server_fed_by_poisson_arrivals() -> None:
    """On a server of one exponential service (an M/M/1 queue under Poisson arrivals) the open
    loop's latency is exponential of rate mu - rate: its p99 read to within 10%."""
    surface = _OneServer()
    for rate in (20.0, 50.0, 80.0):
        truth, clients = sim.open_loop_truth(surface, sim.BASELINE, rate, 99, horizon_s=10.0)  # type: ignore[arg-type]
        assert truth.throughput == pytest.approx(rate, rel=1e-3)  # all it is sent, it serves
        rho = rate / surface.mu
        assert clients == pytest.approx(rho / (1 - rho), rel=1e-3)  # the queue's mean length
        exact = -math.log(0.01) / (surface.mu - rate) * 1000
        assert truth.p99_ms == pytest.approx(exact, rel=0.10)
        assert truth.p50_ms < truth.p90_ms < truth.p99_ms
    # sent more than it serves, its queue grows for the window and no more
    over, clients = sim.open_loop_truth(surface, sim.BASELINE, 150.0, 99, horizon_s=0.5)  # type: ignore[arg-type]
    assert over.throughput == pytest.approx(surface.mu, rel=0.01) and 50 < clients <= 76
    assert over.p99_ms > 5 * -math.log(0.01) / surface.mu * 1000
    # sent far more than it serves: the queue's weights outgrow floats, and the window still ends it
    flooded, clients = sim.open_loop_truth(_Flat(), sim.BASELINE, 1e5, 99, horizon_s=0.5)  # type: ignore[arg-type]
    assert flooded.throughput == pytest.approx(100.0) and clients == pytest.approx(5e4, abs=1)


class _Flat:
    """A server that serves 100 requests a second at any load, each client's request in turn."""

    def truth(self, candidate: Candidate, level: int) -> sim.Reading:
        return sim.Reading(100.0, *(level * 10.0 * f for f in (0.9, 1.1, 1.2, 1.4)))


def test_a_simulated_run_checks_its_winner_in_an_open_loop_as_a_real_run_ends() -> None:
    """The winner's rate is checked as :func:`autotune.finals.check_open_loop` checks it: its
    credited rate first, then lower ones, on a server of its own. It takes simulated time
    after the race and changes nothing before it; ``open_loop_check=False`` leaves it out."""
    checked = sim.simulate(QUIET, seed=0, max_trials=6)
    bare = sim.simulate(QUIET, seed=0, max_trials=6, open_loop_check=False)
    assert checked.winner == bare.winner and checked.verifications == bare.verifications
    assert bare.checked_s == 0.0 and checked.checked_s > QUIET.start_s
    assert checked.sim_s == pytest.approx(bare.sim_s + checked.checked_s)


def test_several_workers_check_the_open_loop_at_once_and_settle_where_one_does() -> None:
    """Four workers measure the check's rates highest first, each on a fresh server, a wave at
    a time: on a quiet surface they settle on the rate one worker's bisection settles on, in
    about half its simulated time (one server's start and point, not one start and four points)."""
    one = sim.simulate(QUIET, seed=0, max_trials=6)
    four = sim.simulate(QUIET, seed=0, max_trials=6, at_once=4)
    assert one.winner_config == four.winner_config and one.open_loop and four.open_loop
    assert [p.request_rate for p in four.open_loop.points] == check_rates(four.open_loop.credited_rate)[:4]
    assert four.open_loop.sustained_rate == one.open_loop.sustained_rate > 0
    assert four.checked_s < 0.6 * one.checked_s


def test_a_family_spans_its_noise_and_each_sla_bites_inside_the_concurrency_range() -> None:
    family = sim.synthetic_family(4, 0.1, seed=3)
    assert len({s.name for s in family}) == 4 and all(s.cv == 0.1 for s in family)
    for surface in family:
        goodput, level = sim.true_goodput(surface, sim.REFERENCE, SPACE)
        assert goodput > 0 and 1 < level < SPACE.concurrency_max


def test_models_on_one_server_share_a_part_of_its_spread_and_its_stalls() -> None:
    """A race round's server moves its models alike: of each one's spread across fresh servers,
    :data:`sim.SHARED_SERVER` is the server's (their correlation), the whole as on a server of its
    own; a stalled server stalls them all."""

    def drawn(surface: sim.Synthetic, count: int) -> list[tuple[sim.Bias, sim.Bias]]:
        servers, pairs = sim.SimServers(surface, random.Random(7)), []
        for _ in range(count):
            with servers.serve_all({"a": sim.REFERENCE, "b": sim.REFERENCE}, Path("log"), "race-1") as on:
                pairs.append((on.models["a"].bias, on.models["b"].bias))
        return pairs

    spread = replace(sim.synthetic_family(1, 0.05, seed=2)[0], server_sd=0.04, tail_sd=0.05)
    pairs = drawn(spread, 4000)
    speeds, tails = [a.speed for a, _ in pairs], [a.tail for a, _ in pairs]
    assert statistics.stdev(speeds) == pytest.approx(0.04, rel=0.1)
    assert statistics.stdev(tails) == pytest.approx(0.05, rel=0.1)
    assert statistics.correlation(speeds, [b.speed for _, b in pairs]) == pytest.approx(0.50, abs=0.05)
    assert statistics.correlation(tails, [b.tail for _, b in pairs]) == pytest.approx(0.40, abs=0.05)
    stalls = drawn(replace(spread, tail_sd=0.0, stall=0.1), 2000)  # a tail above 1: a stalled server
    assert all((a.tail > 1) == (b.tail > 1) for a, b in stalls)
    assert sum(a.tail > 1 for a, _ in stalls) / len(stalls) == pytest.approx(0.1, abs=0.02)


def test_on_a_stalls_surface_a_fresh_server_is_now_and_then_a_stalled_one() -> None:
    """With a stall rate, that share of fresh servers read slower all their life, their tail
    fattened beyond it; without one, servers draw as they always did (no draw more)."""
    quiet = sim.synthetic_family(1, 0.05, seed=2)[0]
    stalls = sim.synthetic_family(1, 0.05, seed=2, stall=0.1)[0]
    rng = random.Random(4)
    drawn = [stalls.server_bias(rng) for _ in range(4000)]
    stalled = [b for b in drawn if b.tail > 1]
    assert len(stalled) / len(drawn) == pytest.approx(0.1, abs=0.02)
    assert all(1.2 <= b.tail <= 1.5 and b.speed < 0.95 for b in stalled)
    assert statistics.fmean(b.speed for b in stalled) == pytest.approx(0.75, abs=0.02)
    one, two = random.Random(5), random.Random(5)
    as_before = [sim.Bias(max(0.5, 1 + two.gauss(0, 0.025))) for _ in range(50)]
    assert [quiet.server_bias(one) for _ in range(50)] == as_before
    plain = quiet.window(sim.REFERENCE, 8, random.Random(6), 0.5, sim.Bias(0.8, 1.4))
    slow = quiet.window(sim.REFERENCE, 8, random.Random(6), 0.5, sim.Bias(0.8))
    assert plain.throughput == pytest.approx(slow.throughput)
    assert plain.p99_ms == pytest.approx(slow.p99_ms * 1.4)


def test_a_surveyed_surface_reads_its_windows_and_interpolates_between_levels(tmp_path: Path) -> None:
    """A survey file as benchmarks/survey.py writes it: the truth is the windows' mean, between
    surveyed levels the line between them, above the last its throughput and a latency growing with
    the clients; a window is one of the nearest level's."""
    on = Candidate(2, "KIND_CPU", (), 8, True, (), 0, False)
    off = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)
    windows = {
        sim.survey_label(on): {"1": [[100, 2.0], [110, 2.2]], "4": [[380, 4.0], [400, 4.4]]},
        sim.survey_label(off): {"1": [[90, 2.5], [90, 2.5]], "4": [[200, 9.0], [220, 11.0]]},
    }
    data = {"version": sim.SURVEY_VERSION, "model": "toy", "percentile": 95, "limit_ms": 8.0, "cores": 2,
            "window_s": 0.5, "windows": windows}  # fmt: skip
    path = tmp_path / "toy.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    surface = sim.Surveyed.load(path)
    assert surface.sla == Sla(95, 8.0) and surface.cores == 2
    assert surface.truth(on, 1).throughput == 105 and surface.truth(on, 4).p95_ms == pytest.approx(4.2)
    assert surface.truth(on, 2).throughput == pytest.approx(105 + (390 - 105) / 3)  # a third of the way
    assert surface.truth(replace(off, max_batch_size=4), 4).throughput == 210  # no batching: one entry
    rng = random.Random(1)
    drawn = {surface.window(on, 4, rng, 0.5, sim.Bias(1.0)).throughput for _ in range(50)}
    assert drawn == {380.0, 400.0}
    assert sim.true_goodput(surface, on, replace(SPACE, concurrency_max=4)) == (390.0, 4)
    assert sim.true_goodput(surface, off, replace(SPACE, concurrency_max=4))[1] < 4  # 4 breaks 8 ms
    with pytest.raises(KeyError, match="was not surveyed"):
        surface.truth(replace(on, instance_count=3), 1)
    beyond = surface.truth(off, 8)  # past the last level surveyed: saturated, it only queues
    assert beyond.throughput == 210 and beyond.p95_ms == pytest.approx(10.0 * 8 / 4)
    assert surface.missing(SPACE) == len(sim.candidates(SPACE)) - 2  # a survey that stopped part way
    slower = replace(surface, speed=0.5)  # a day the machine ran at half the survey's speed
    assert slower.truth(on, 4).throughput == 195 and slower.truth(on, 4).p95_ms == pytest.approx(8.4)
    assert {slower.window(on, 4, rng, 0.5, sim.Bias(1.0)).throughput for _ in range(50)} == {190.0, 200.0}
    latencies = sorted({round(slower.window(on, 4, rng, 0.5, sim.Bias(1.0)).p95_ms, 9) for _ in range(50)})
    assert latencies == pytest.approx([8.0, 8.8])
    assert sim.true_goodput(slower, on, replace(SPACE, concurrency_max=4))[1] < 4  # 4 now breaks 8 ms
    drawn = sim.measured_spreads(surface)  # one server: its fresh servers' spreads as measured ones
    assert sim.MEASURED_SERVER_SD[0] <= drawn.bias_sd <= sim.MEASURED_SERVER_SD[1]
    assert drawn.tail_cv is not None and sim.MEASURED_TAIL_SD[0] <= drawn.tail_cv <= sim.MEASURED_TAIL_SD[1]
    assert sim.measured_spreads(surface) == drawn  # its own stream: the same draws each time
    assert sim.measured_spreads(replace(surface, server_cv=0.01)).tail_cv is None  # given: kept


def test_a_surveys_servers_tell_a_latency_spread_of_their_own(tmp_path: Path) -> None:
    """Where another server's latency lies off what its throughput explains (Little's law), by
    config, a fresh server draws a latency factor of its own with that spread (``tail_spread``);
    a latency that follows the throughput, or one off alike for every config (a drift), gives none."""
    import math

    on = Candidate(2, "KIND_CPU", (), 8, True, (), 0, False)
    off = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)
    first = {
        sim.survey_label(on): {"1": [[100, 2.0], [100, 2.0]], "4": [[400, 4.0], [400, 4.0]]},
        sim.survey_label(off): {"1": [[90, 2.5], [90, 2.5]], "4": [[200, 10.0], [200, 10.0]]},
    }

    def load(throughput: dict[Candidate, float], latency: dict[Candidate, float]) -> sim.Surveyed:
        again = {
            sim.survey_label(c): {
                lv: [[t * throughput[c], ms * latency[c]] for t, ms in pairs]
                for lv, pairs in first[sim.survey_label(c)].items()
            }
            for c in (on, off)
        }
        data = {"version": sim.SURVEY_VERSION, "model": "toy", "percentile": 95, "limit_ms": 8.0,
                "cores": 2, "window_s": 0.5, "windows": first, "again": [again]}  # fmt: skip
        path = tmp_path / "toy.json.gz"
        path.write_bytes(gzip.compress(json.dumps(data).encode()))
        return sim.Surveyed.load(path)

    apart = load({on: 1.0, off: 1.0}, {on: 1.1, off: 0.9})
    assert apart.tail_spread == pytest.approx(math.log(1.1 / 0.9) / 2)
    assert apart.server_spread == pytest.approx(0.0, abs=1e-12)  # the throughputs agree
    rng = random.Random(1)
    tails = [apart.server_bias(rng).tail for _ in range(4000)]
    assert statistics.stdev(tails) == pytest.approx(apart.tail_spread, rel=0.1)
    slow = apart.window(on, 4, random.Random(2), 0.5, sim.Bias(1.0, 1.2)).p95_ms
    assert slow == pytest.approx(1.2 * apart.window(on, 4, random.Random(2), 0.5, sim.Bias(1.0)).p95_ms)
    follows = load({on: 1.1, off: 0.9}, {on: 1 / 1.1, off: 1 / 0.9})  # Little's law: no latency of its own
    assert follows.tail_spread == pytest.approx(0.0, abs=1e-12) and follows.server_spread > 0.09
    assert all(abs(follows.server_bias(rng).tail - 1.0) < 1e-9 for _ in range(20))
    drift = load({on: 1.0, off: 1.0}, {on: 1.1, off: 1.1})
    assert drift.tail_spread == pytest.approx(0.0, abs=1e-12)


def test_a_survey_read_again_on_other_servers_takes_their_mean_and_measures_their_spread(
    tmp_path: Path,
) -> None:
    """A survey's "again" (benchmarks/survey.py --server 2): the truth is the servers' mean, a
    window one of either server's scaled to it, and a fresh server's spread the servers' own per
    config (a drift that moves every config alike is not a server's spread); a second server may
    read only some configs again (the first must read them all)."""
    import math

    on = Candidate(2, "KIND_CPU", (), 8, True, (), 0, False)
    off = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)
    first = {
        sim.survey_label(on): {"1": [[100, 2.0], [110, 2.2]], "4": [[380, 4.0], [400, 4.4]]},
        sim.survey_label(off): {"1": [[90, 2.5], [90, 2.5]], "4": [[200, 9.0], [220, 11.0]]},
    }

    def scaled(by: dict[str, float]) -> dict[str, Any]:
        return {
            label: {lv: [[t * by[label], ms] for t, ms in pairs] for lv, pairs in levels.items()}
            for label, levels in first.items()
            if label in by
        }

    def load(again: list[dict[str, Any]]) -> sim.Surveyed:
        data = {"version": sim.SURVEY_VERSION, "model": "toy", "percentile": 95, "limit_ms": 8.0,
                "cores": 2, "window_s": 0.5, "windows": first, "again": again}  # fmt: skip
        path = tmp_path / "toy.json.gz"
        path.write_bytes(gzip.compress(json.dumps(data).encode()))
        return sim.Surveyed.load(path)

    apart = load([scaled({sim.survey_label(on): 1.1, sim.survey_label(off): 0.9})])
    assert apart.truth(on, 1).throughput == pytest.approx(105 * 1.05)
    assert apart.truth(off, 4).throughput == pytest.approx(210 * 0.95)
    rng = random.Random(1)
    drawn = {round(apart.window(on, 4, rng, 0.5, sim.Bias(1.0)).throughput, 6) for _ in range(80)}
    assert drawn == {round(380 * 1.05, 6), round(400 * 1.05, 6)}  # from either server, scaled to the mean
    assert apart.server_spread == pytest.approx(math.log(1.1 / 0.9) / 2)  # +-10%: about 0.1
    bias = [apart.server_bias(rng).speed for _ in range(4000)]
    assert statistics.stdev(bias) == pytest.approx(apart.server_spread, rel=0.1)
    drift = load([scaled({sim.survey_label(on): 0.9, sim.survey_label(off): 0.9})])
    assert drift.server_spread == pytest.approx(0.0, abs=1e-12)
    assert sim.Surveyed.load(tmp_path / "toy.json.gz").missing(SPACE) == len(sim.candidates(SPACE)) - 2
    part = load([{sim.survey_label(on): scaled({sim.survey_label(on): 1.1})[sim.survey_label(on)]}])
    assert part.missing(SPACE) == len(sim.candidates(SPACE)) - 2  # a part read again: none more missing
    assert part.truth(off, 1).throughput == 90  # read by the first server alone
    assert part.truth(on, 1).throughput == pytest.approx(105 * 1.05)
    assert part.server_spread is None  # one config read twice cannot tell a server from a drift
    assert load([{}]).server_spread is None and load([{}]).truth(on, 1).throughput == 105  # none again


def test_a_survey_of_a_gpu_model_is_tuned_in_its_own_space_from_its_own_config(tmp_path: Path) -> None:
    """A survey that records its space and the model's config (benchmarks/survey.py, as the GPU
    survey does) is simulated in that space, on the server's GPUs, from that config; one that does
    not (an older file) in the default space from the examples' config."""
    space = {"instance_group": {"count": [1, 2], "kind": ["KIND_GPU"], "gpus": [[0]]},
             "max_batch_size": [8], "dynamic_batching": {"enabled": [True, False]},
             "load": {"concurrency": {"min": 1, "max": 4}}}  # fmt: skip
    mine = Candidate(1, "KIND_GPU", (0,), 8, False, (), 0, False)
    gpu = sim.Surveyed("gpu", Sla(95, 8.0), 16, {}, space=None, gpus=1)
    data = {"version": sim.SURVEY_VERSION, "model": "mlp", "percentile": 95, "limit_ms": 8.0, "cores": 16,
            "gpus": 1, "window_s": 0.5, "space": space, "baseline": {**vars(mine), "gpus": [0]}}  # fmt: skip
    data["windows"] = {
        sim.survey_label(c): {
            "1": [[100.0 * c.instance_count, 2.0]] * 2,
            "4": [[300.0 * c.instance_count, 7.0]] * 2,
        }
        for c in sim.candidates(sim.parse_search_space(space, gpu_available=True))
    }
    path = tmp_path / "mlp.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    surface = sim.Surveyed.load(path)
    assert surface.gpus == 1 and surface.baseline == mine
    tuned_in = sim.space_of(surface)
    assert tuned_in.kind == ("KIND_GPU",) and tuned_in.concurrency_max == 4 and surface.missing(tuned_in) == 0
    outcome = sim.simulate(surface, 0)
    assert outcome.results[0].candidate == mine  # yours first, as a run measures it
    assert all(r.candidate is None or r.candidate.kind == "KIND_GPU" for r in outcome.results)
    assert sim.space_of(gpu) == SPACE and sim.baseline_of(gpu) == sim.BASELINE  # no space recorded


def test_a_survey_of_batched_requests_is_tuned_in_the_space_its_run_narrowed(tmp_path: Path) -> None:
    """A survey whose workload sends batches of 4 (benchmarks/survey.py --batch-size 4) is
    simulated in the space a run with that workload tunes in: no max_batch_size below 4."""
    space = {"instance_group": {"count": [1, 2]}, "max_batch_size": [1, 2, 4, 8],
             "dynamic_batching": {"enabled": [True, False]}}  # fmt: skip
    data = {"version": sim.SURVEY_VERSION, "model": "toy", "percentile": 99, "limit_ms": 8.0, "cores": 2,
            "gpus": 0, "window_s": 0.5, "space": space, "windows": {}}  # fmt: skip
    path = tmp_path / "toy.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert sim.space_of(sim.Surveyed.load(path)).max_batch_size == (1, 2, 4, 8)  # one sample a request
    data["workload"] = {"input_data": "random", "shapes": {}, "batch_size": 4, "order": "spread"}
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert sim.space_of(sim.Surveyed.load(path)).max_batch_size == (4, 8)


def test_a_space_that_only_batches_never_measures_a_config_without_batching_but_yours() -> None:
    """The issue's new user: dynamic_batching.enabled [true] only, your config without it. Your
    config is measured (as it is: its trial has no params, the sampler never takes its figures
    for a config of the space); no seed, neighbour or proposal leaves the space."""
    only = replace(SPACE, dynamic_batching=(True,))
    surface = sim.synthetic_family(1, 0.05, seed=2)[0]
    for seed in range(3):
        outcome = sim.simulate(surface, seed, space=only)
        measured = [r for r in outcome.results if r.measurement is not None]
        baseline = [r for r in measured if r.baseline]
        assert len(baseline) == 1 and baseline[0].params == {} and baseline[0].candidate == sim.BASELINE
        assert all(
            r.candidate is not None and r.candidate.dynamic_batching for r in measured if not r.baseline
        )
        assert not any(r.reason.startswith("outside") for r in outcome.results)
        assert outcome.honest


def test_after_the_seeds_the_search_walks_from_the_best_trial() -> None:
    """While nothing else is queued, the next trial is a one-step change of the best trial so
    far (by its figure) that no trial has tried: the first trials after the seeds walk."""
    from autotune.search import ranking, walk

    surface = sim.synthetic_family(1, 0.05, seed=2)[0]
    outcome = sim.simulate(surface, seed=0, max_trials=12, finalists=0)
    told = sorted((r for r in outcome.results if r.candidate is not None), key=lambda r: r.number)
    seeds = 1 + len(walk.heuristic_seeds(SPACE, surface.cores, sim.BASELINE))
    for i in range(seeds, seeds + 4):
        before = [r for r in told[:i] if r.measurement is not None]
        best = max((r for r in before if r.feasible), key=ranking.score)
        assert best.candidate is not None and told[i].candidate is not None
        assert told[i].candidate in walk.neighbours(best.candidate, SPACE), (i, told[i].candidate)
        assert not any(walk.equivalent(told[i].candidate, r.candidate) for r in told[:i] if r.candidate)


def test_a_converged_search_ends_once_the_finalists_neighbours_are_measured_not_every_ties() -> None:
    """A search that ends before its budget has measured every one-step neighbour of the
    ``--finalists`` (the best and the ties the race takes) that is not a losing step; a tie the
    race would not take may keep neighbours untried."""
    from autotune.search import walk

    surface = sim.synthetic_family(1, 0.02, seed=0)[0]
    left_of_ties = 0
    for seed in range(3):
        outcome = sim.simulate(surface, seed, finalists=2)
        assert len(outcome.results) < 20  # converged, within the budget
        assert walk.unexplored(outcome.results, SPACE, n=2) == []
        left_of_ties += len(walk.unexplored(outcome.results, SPACE))
    assert left_of_ties > 0


def test_a_surveyed_surfaces_fresh_servers_spread_as_measured_else_by_half_the_windows() -> None:
    """Surveyed.server_cv (a survey's "server_cv", or simulate.py --server-spread) sets how far a
    fresh server reads off the truth; without it (and one server surveyed), half the windows'
    pooled spread."""
    surveyed = sim.Surveyed.load(Path(__file__).resolve().parents[1] / "benchmarks/surveys/cnn.json.gz")
    rng = random.Random(3)
    own = statistics.stdev(surveyed.server_bias(rng).speed for _ in range(4000))
    assert surveyed.server_cv is None and own == pytest.approx(surveyed.cv / 2, rel=0.1)
    wide = replace(surveyed, server_cv=0.09)
    assert statistics.stdev(wide.server_bias(rng).speed for _ in range(4000)) == pytest.approx(0.09, rel=0.1)


class _Servers(sim.SimServers):
    """Counts the servers started: alone (``serve``) and shared by a round (``serve_all``)."""

    alone: int = 0
    shared: list[int] = []  # noqa: RUF012  # each shared server's model count, per class

    @contextmanager
    def serve(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        type(self).alone += 1
        with super().serve(*args, **kwargs) as server:
            yield server

    @contextmanager
    def serve_all(self, candidates: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        type(self).shared.append(len(candidates))
        with super().serve_all(candidates, *args, **kwargs) as server:
            yield server


class _Shared(_Servers):
    alone, shared = 0, []


class _OnGpus(_Servers):
    alone, shared = 0, []


class _SharedFails(_Servers):
    alone, shared = 0, []

    @contextmanager
    def serve_all(self, candidates: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        type(self).shared.append(len(candidates))
        raise LaunchError("the models did not fit on one server")
        yield


def test_a_race_rounds_contenders_share_one_server_or_each_gets_its_own_when_it_fails() -> None:
    """A round's finalists are served by one server, each as a model of its own, their points
    naming it; where that server cannot start, each is measured on a server of its own and the
    race is run the same."""
    for kind in (_Shared, _SharedFails):
        outcome = sim.simulate(QUIET, seed=2, servers_type=kind, max_trials=8, finalists=2)
        rounds = sum(len(v.points) + sum(len(o) for _, o in v.others) for v in outcome.verifications)
        finalists = [v for v in outcome.verifications if not v.control]
        (yours,) = [v for v in outcome.verifications if v.control]  # your config raced beside them
        assert len(finalists) == 2 and kind.shared and set(kind.shared) == {3}
        assert yours.trial == next(r.number for r in outcome.results if r.baseline)
        assert len(yours.points) == max(len(v.points) for v in finalists)  # on the same servers
        stages = [{p.stage for p in v.points} for v in outcome.verifications]
        assert all(stage.startswith("race-") for named in stages for stage in named)  # each names its server
        beside = {p.stage for p in yours.points} & {p.stage for v in finalists for p in v.points}
        assert bool(beside) == (kind is _Shared)  # rounds the gain compares round by round
        searched = outcome.measured
        if kind is _Shared:  # each shared server served three rounds
            assert kind.alone + len(kind.shared) == searched + rounds - 2 * len(kind.shared) + 1
        else:  # every round on a server of its own
            assert kind.alone == searched + rounds + 1  # and the open-loop check's
        assert outcome.winner in {v.trial for v in finalists}


def test_finalists_on_gpus_race_each_on_a_server_of_its_own() -> None:
    """A server's GPU figures (its memory) are all its models': finalists on GPUs never share one."""
    surface = sim.Surveyed.load(
        Path(__file__).parent.parent / "benchmarks" / "surveys" / "torch_mlp_gpu.json.gz"
    )
    outcome = sim.simulate(surface, seed=1, servers_type=_OnGpus, max_trials=8, finalists=2)  # two raced
    assert all(r.candidate is None or r.candidate.kind == "KIND_GPU" for r in outcome.results)
    rounds = sum(len(v.points) + sum(len(o) for _, o in v.others) for v in outcome.verifications)
    assert len([v for v in outcome.verifications if not v.control]) == 2 and _OnGpus.shared == []
    assert _OnGpus.alone == outcome.measured + rounds + 1  # and the open-loop check's


def test_a_contender_sent_down_a_level_as_its_rounds_run_out_is_raced_there() -> None:
    """The winner is a finalist that met the SLA where one could: the race does not end with its
    leader sent down a level (by the round that ends the race, or its level's) and not measured
    there, for a trial never raced to win instead (short budgets, where that happens most)."""
    from autotune.search import racing

    surface = sim.Surveyed.load(
        Path(__file__).parent.parent / "benchmarks" / "surveys" / "torch_mlp_gpu.json.gz"
    )
    for repeats in (2, 3, 6):
        for seed in range(12) if repeats < 6 else [89]:  # 89: a budget that ended at a break
            outcome = sim.simulate(surface, seed, repeats=repeats)
            by_number = {r.number: r for r in outcome.results}
            if outcome.winner in {v.trial for v in outcome.verifications}:
                continue
            for v in outcome.verifications:  # none met it: each had no level left below
                sla = Sla(surface.sla.percentile, v.limit_ms)
                listed = racing.race_levels(by_number[v.trial], sla)
                assert racing.level_below(v.concurrency, v.points, sla, listed) is None, (repeats, seed)


def test_a_tally_reads_the_winners_share_of_the_best_at_the_bar_and_on_average() -> None:
    """``good`` counts winners at 0.95 of the best or more; ``mean`` averages every run's share
    (a run without a winner counts 0), so 0.948 and 0.953 read alike there."""
    ratios = (0.948, 0.953, 1.0, 0.0)
    judged = [
        sim.Judged("s", i, None, 0, r, 0.9 if r > 0 else math.inf, 1.0, 1, True) for i, r in enumerate(ratios)
    ]
    tally = sim.Tally(judged)
    assert tally.good == 0.5 and tally.meets == 0.75
    assert abs(tally.mean - statistics.fmean(ratios)) < 1e-12
    assert sim.Tally().mean == 0.0


def test_goods_interval_holds_the_runs_error_and_a_surveys_own_error_of_its_truth() -> None:
    """``Tally.good_interval``: the runs drawn again (a synthetic surface: its truth exact, one
    table that judges each winner as ``judge`` did); a surveyed surface's truth redrawn by its
    servers' spread over the root of their count, so a top its survey cannot tell apart widens it."""
    noisy = replace(QUIET, name="noisy", cv=0.05)
    (exact,) = sim.truth_tables(noisy, SPACE, 50, random.Random(0))
    best = max(exact.values())
    judged = [sim.judge(noisy, SPACE, sim.simulate(noisy, seed), best) for seed in range(3)]
    for j in judged:
        assert j.winner is not None and exact[sim.survey_label(j.winner)] / best == pytest.approx(j.ratio)
    labels = sorted(exact, key=exact.__getitem__)
    by_label = {sim.survey_label(c): c for c in sim.candidates(SPACE)}
    top, low = by_label[labels[-1]], by_label[labels[0]]
    half = sim.Tally([sim.Judged("s", i, (low, top)[i % 2], 1, 0.0, 0.9, 1.0, 1, True) for i in range(100)])
    lo, hi = half.good_interval([exact], random.Random(1))
    assert 0.35 < lo < 0.5 < hi < 0.65  # a share of 100 runs: about +-10%
    assert sim.Tally(half.judged[1::2]).good_interval([exact], random.Random(1)) == (1.0, 1.0)
    surveys = Path(__file__).resolve().parents[1] / "benchmarks/surveys"
    surveyed = sim.Surveyed.load(surveys / "bertQA-20261129.json.gz")
    space = sim.space_of(surveyed)
    one = next(c for c in sim.candidates(space) if sim.survey_label(c) in surveyed.again[0])  # read twice
    once = next(c for c in sim.candidates(space) if sim.survey_label(c) not in surveyed.again[0])
    assert surveyed.truth_sd(one) == pytest.approx(surveyed.bias_sd / 2**0.5) and noisy.truth_sd(one) == 0.0
    assert surveyed.truth_sd(once) == surveyed.bias_sd == surveyed.server_spread
    tables = sim.truth_tables(surveyed, space, 60, random.Random(2))
    (own,) = sim.truth_tables(replace(surveyed, server_cv=0.0), space, 60, random.Random(2))
    moved = [t[sim.survey_label(one)] / own[sim.survey_label(one)] for t in tables]
    sd = surveyed.truth_sd(one)  # the factor's; a goodput moves more where the level that meets it moves
    assert len(tables) == 60 and 0.6 * sd < statistics.stdev(moved) < 3 * sd
    winners = [c for c in sim.candidates(space) if own[sim.survey_label(c)] >= 0.95 * max(own.values())]
    sure = sim.Tally([sim.Judged("s", i, winners[0], 1, 1.0, 0.9, 1.0, 1, True) for i in range(100)])
    assert sure.good_interval([own], random.Random(3)) == (1.0, 1.0)
    assert sure.good_interval(tables, random.Random(3))[0] < 1.0  # its truth's own error: not always the top


def test_a_fresh_servers_warm_up_slows_its_first_windows_and_decays_as_it_serves() -> None:
    """sim.WarmUp, as measured: latency ``1 + size e^(-t/length)`` times the steady one's, the
    throughput a share of that excess less; no warm-up draws nothing (runs as before)."""
    steady = sim.Reading(1000.0, 5.0, 5.5, 5.8, 6.0)
    hot = sim.Transient(size=3.0, length_s=2.0, share=0.2)
    first, later = hot.apply(steady, 0.5), hot.apply(steady, 20.0)
    assert first.p99_ms == pytest.approx(6.0 * (1 + 3.0 * math.exp(-0.25)))
    assert first.throughput == pytest.approx(1000.0 / (1 + 0.2 * 3.0 * math.exp(-0.25)))
    assert later.p99_ms == pytest.approx(6.0, rel=1e-3) and sim.Transient().apply(steady, 0.0) == steady
    rng = random.Random(1)
    drawn = [sim.GPU_WARMUP.draw(rng) for _ in range(50)]
    assert all(3.0 <= t.size <= 6.0 and 2.5 <= t.length_s <= 5.0 for t in drawn)
    quiet = sim.simulate(QUIET, seed=2, max_trials=6)
    assert sim.simulate(QUIET, seed=2, max_trials=6, warmup=None) == quiet  # the default: none
    warm = sim.simulate(QUIET, seed=2, max_trials=6, warmup=sim.GPU_WARMUP)

    def first(outcome: sim.SimOutcome) -> float:  # the first trial's first point, on a fresh server
        measured = outcome.results[0].measurement
        assert measured is not None
        return measured.points[0].p95_ms

    assert first(warm) > 2 * first(quiet) and quiet.turned == 0


def test_the_headline_reads_the_recommended_point_against_the_sla_itself() -> None:
    """``users``: the winner's true throughput where it is recommended over the best goodput
    under the SLA itself (not the search's limit, 10% under it); the share of runs gets a Wilson
    interval."""
    surface = sim.synthetic_family(1, 0.05, seed=2)[0]
    best = max(sim.true_goodput(surface, c, SPACE)[0] for c in sim.candidates(SPACE))
    limit = surface.sla.limit_ms * 0.9
    there = max(sim.true_goodput(surface, c, SPACE, limit)[0] for c in sim.candidates(SPACE))
    judged = sim.judge(surface, SPACE, sim.simulate(surface, 0, space=SPACE), best, (limit, there))
    assert judged.winner is not None and 0 < judged.users <= judged.at_point  # the SLA's best is higher
    assert judged.users * best == pytest.approx(judged.at_point * there)  # one throughput, two bests
    low, high = sim.wilson(0.5, 100)
    assert low == pytest.approx(0.404, abs=1e-3) and high == pytest.approx(0.596, abs=1e-3)
    assert sim.wilson(1.0, 200) == (pytest.approx(0.981, abs=1e-3), 1.0)


def test_a_surveyed_points_windows_are_one_block_of_a_servers_recorded_windows() -> None:
    """Resampled in blocks: a point's windows are consecutive windows the survey recorded at the
    level (from a random start, round the end), so their correlation stays; a window drawn
    without a block is any one of them."""
    surface = sim.Surveyed.load(
        Path(__file__).parent.parent / "benchmarks" / "surveys" / "torch_mlp_gpu.json.gz"
    )
    assert not surface.again  # one server: its windows as recorded
    label, levels = next(iter(surface.windows.items()))
    level, recorded = next(iter(levels.items()))
    candidate = next(c for c in sim.candidates(sim.space_of(surface)) if sim.survey_label(c) == label)
    start = surface.block_start(random.Random(3))
    assert start is not None
    read = [
        surface.window(
            candidate, level, random.Random(k), sim.QUIET_WINDOW_S, sim.Bias(1.0), (start, k)
        ).throughput
        for k in range(len(recorded) + 2)
    ]
    expected = [recorded[(start + k) % len(recorded)][0] for k in range(len(recorded) + 2)]
    assert read == pytest.approx(expected)
    assert sim.synthetic_family(1, 0.05, seed=2)[0].block_start(random.Random(3)) is None


def test_the_measured_world_draws_each_surfaces_server_spreads_from_measurements() -> None:
    """``synthetic_family(world="measured")``: the same surfaces, each with a fresh server's
    throughput and latency spreads drawn from the measured ranges, whatever its window CV; the
    rules' world keeps the noise model's own assumption, a server off by CV/2."""
    rules = sim.synthetic_family(4, 0.20, seed=3)
    measured = sim.synthetic_family(4, 0.20, seed=3, world="measured")
    assert [replace(m, server_sd=None, tail_sd=0.0) for m in measured] == rules
    low, high = sim.MEASURED_SERVER_SD
    assert all(m.server_sd is not None and low <= m.server_sd <= high for m in measured)
    assert all(0.0 <= m.tail_sd <= sim.MEASURED_TAIL_SD[1] for m in measured)
    assert len({m.server_sd for m in measured}) == 4  # each its own
    rng = random.Random(0)
    assert statistics.stdev(rules[0].server_bias(rng).speed for _ in range(4000)) == pytest.approx(
        0.10, rel=0.1
    )
    found = max(measured, key=lambda m: m.tail_sd)
    biases = [found.server_bias(rng) for _ in range(4000)]
    assert statistics.stdev(b.speed for b in biases) == pytest.approx(found.server_sd, rel=0.1)
    assert statistics.stdev(b.tail for b in biases) == pytest.approx(found.tail_sd, rel=0.1)


def test_a_warm_up_draws_apart_so_a_run_with_it_is_the_run_without_until_it_turns_a_decision() -> None:
    """A fresh server's warm-up is drawn from a stream of its own: a warm-up of no size leaves the
    run exactly as it is without one, and a real one changes what it turns, no more."""
    none = sim.WarmUp((0.0, 0.0), (0.1, 0.2))
    noisy = replace(QUIET, cv=0.05)  # every draw of the run's stream moves its figures
    plain = sim.simulate(noisy, seed=3, max_trials=8)
    assert sim.simulate(noisy, seed=3, max_trials=8, warmup=none) == plain
    warm = sim.simulate(noisy, seed=3, max_trials=8, warmup=sim.GPU_WARMUP)
    assert warm != plain and warm.results[0].candidate == plain.results[0].candidate
    assert plain.winner_config is not None


def test_a_machines_drift_moves_readings_apart_with_time_alike_for_every_server_on_it() -> None:
    """sim.Drift: the log speed wanders by its sd and holds for hold_s, one path a run, read
    again alike when workers go back in time; none by default: the run as before."""
    walk = sim.Drift(sd=0.05, hold_s=20.0).path(random.Random(4))
    logs = [math.log(walk.speed(t)) for t in range(0, 200_000)]
    assert statistics.pstdev(logs) == pytest.approx(0.05, rel=0.1)
    for lag in (5, 20, 80):  # speeds lag seconds apart differ by sd sqrt(2 (1 - e^(-lag / hold)))
        apart = [logs[i + lag] - logs[i] for i in range(0, len(logs) - lag, lag)]
        expected = 0.05 * math.sqrt(2 * (1 - math.exp(-lag / 20)))
        assert statistics.pstdev(apart) == pytest.approx(expected, rel=0.1)
    assert walk.speed(400.5) == walk.speed(400.0)  # read again alike
    slow = sim.drifted(sim.Reading(1000.0, 5.0, 5.5, 5.8, 6.0), 0.5)
    assert (slow.throughput, slow.p99_ms) == (500.0, 12.0)
    noisy = replace(QUIET, cv=0.05)
    plain = sim.simulate(noisy, seed=3, max_trials=8)
    assert sim.simulate(noisy, seed=3, max_trials=8, drift=sim.Drift()) == plain
    moved = sim.simulate(QUIET, seed=3, max_trials=8, drift=sim.Drift(sd=0.2, hold_s=10.0))

    def off(outcome: sim.SimOutcome) -> list[float]:  # a noise-free surface: each point's truth
        points = [(r.candidate, p) for r in outcome.results if r.measurement for p in r.measurement.points]
        return [abs(math.log(p.throughput / QUIET.truth(c, int(p.level)).throughput)) for c, p in points]

    assert max(off(sim.simulate(QUIET, seed=3, max_trials=8))) < 1e-9 < 0.1 < max(off(moved))


def test_a_race_decided_by_a_warm_up_is_told_by_its_rounds_read_without_it() -> None:
    """``decided``: the race's rounds read without their servers' warm-up (the same windows)
    crown another winner. Here the faster finalist's rounds broke the limit only by the warm-up;
    without it they meet it and it wins. A race the warm-up did not touch reads the same."""
    sla = Sla(95, 20.0)
    fast_warm = [windowed(8, 1200.0, 24.0) for _ in range(3)]  # over the limit: the warm-up's
    fast_steady = [windowed(8, 1200.0, 15.0) for _ in range(3)]
    slow = [windowed(8, 1000.0, 12.0) for _ in range(3)]
    read = [Verification(0, 8, tuple(fast_warm), 0), Verification(1, 8, tuple(slow), 3)]
    steady = {id(w): s for w, s in zip(fast_warm, fast_steady, strict=True)}
    assert sim.race_winner(read, [], sla) == 1
    assert sim.race_winner(sim.read_steady(read, steady, sla), [], sla) == 0
    assert sim.race_winner(sim.read_steady(read, {}, sla), [], sla) == 1


def test_rounds_read_again_without_a_warm_up_are_judged_as_the_race_judged_them() -> None:
    """With no warm-up there is nothing to read without: every verification's ``sla_met`` comes
    back as the race recorded it, and the steady winner is the winner."""
    noisy = replace(QUIET, cv=0.05)
    for seed in range(4):
        plain = sim.simulate(noisy, seed=seed, max_trials=8)
        sla = noisy.sla.tightened(RunSettings.margin)  # the race judges at the search's limit
        assert plain.verifications and not plain.decided and plain.steady_winner == plain.winner
        again = sim.read_steady(plain.verifications, {}, sla)
        assert [v.sla_met for v in again] == [v.sla_met for v in plain.verifications]


class _Watching(Trials):
    """Trials that note, at each ask, the simulated time, each trial's state as the study reads
    it then, and the trial asked."""

    seen: list[tuple[float, dict[int, str], int]]

    def ask(self, study: Any) -> Any:
        states = {r.number: r.state for r in study.results()}
        asked = super().ask(study)
        self.__dict__.setdefault("seen", []).append((self.clock(), states, asked.number))
        return asked


def test_trials_at_once_take_each_step_of_the_walk_from_the_best_when_a_worker_asks_it() -> None:
    """Four workers: once the seeds are asked, nothing waits in the queue after an ask (a step
    queued earlier would be a step from an earlier best)."""
    left: list[int] = []

    class Queue(Trials):
        def ask(self, study: Any) -> Any:
            asked = super().ask(study)
            left.append(study.queued())
            return asked

    out = sim.simulate(QUIET, seed=2, max_trials=16, at_once=4, trials_type=Queue)
    assert out.honest and 0 in left
    assert not any(left[left.index(0) :]), left


def test_the_first_wave_beyond_the_seeds_steps_from_the_seeds_that_batch() -> None:
    """Eight workers: before any trial ended, the trials asked beyond the queued seeds are one-step
    changes of a seed in flight that batches (walk.steps_ahead), not the sampler's random guesses."""
    watched: list[_Watching] = []

    class Kept(_Watching):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            watched.append(self)

    out = sim.simulate(QUIET, seed=2, max_trials=16, at_once=8, trials_type=Kept)
    space = sim.space_of(QUIET)
    candidates = {r.number: r.candidate for r in out.results}
    first = [n for t, _, n in watched[0].seen if t == 0.0]
    seeds = len(walk.heuristic_seeds(space, 2, candidates[0])) + 1  # and your config
    origins = [c for n in first[:seeds] if (c := candidates[n]) is not None and c.dynamic_batching]
    rest = [candidates[n] for n in first[seeds:]]
    assert out.honest and origins and len(first) == 8
    assert all(any(c in walk.neighbours(o, space) for o in origins) for c in rest), rest


def test_with_no_step_left_from_the_best_a_free_worker_steps_from_the_best_s_steps_in_flight() -> None:
    """Four workers: where the best trial has no untried step and the search has not converged,
    the trial asked is the first step beyond the best's steps in flight (walk.steps_beyond), not
    the sampler's proposal."""
    surface = sim.synthetic_family(4, 0.05, seed=1)[0]
    space = sim.space_of(surface)
    beyond: list[bool] = []

    class Kept(Trials):
        def ask(self, study: Any) -> Any:
            before = study.results()
            asked = super().ask(study)
            going = not walk.converged(before, 4, study.scoring) and not walk.out_of_ideas(before)
            best = walk.best_trial(before, study.scoring)
            if best is not None and going and not walk.unexplored(before, space, study.scoring, 1):
                steps = walk.steps_beyond(before, space, study.scoring)
                beyond.append(bool(steps) and asked.candidate == steps[0])
            return asked

    out = sim.simulate(surface, seed=1, max_trials=16, at_once=4, trials_type=Kept)
    assert out.honest and beyond and all(beyond), beyond


def test_trials_at_once_end_in_simulated_time_and_take_less_of_it() -> None:
    """Four workers: a trial's end reaches the study only once the simulated time has got there
    (until then it is in flight), no more trials are asked than --max-trials, and the run takes a
    fraction of one worker's time."""
    watched: list[_Watching] = []

    class Kept(_Watching):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            watched.append(self)

    alone = sim.simulate(QUIET, seed=2, max_trials=12)
    together = sim.simulate(QUIET, seed=2, max_trials=12, at_once=4, trials_type=Kept)
    assert together.honest and walk.finished(list(together.results)) <= 12
    assert together.sim_s < 0.6 * alone.sim_s
    seen = watched[0].seen
    ends = {n: t + next(r.duration_s for r in together.results if r.number == n) for t, _, n in seen}
    for t, states, _ in seen:
        told = [n for n, state in states.items() if state != "RUNNING"]
        assert all(ends[n] <= t + 1e-9 for n in told), (t, states)
    assert max(sum(s == "RUNNING" for s in states.values()) for _, states, _ in seen) == 3  # four at once


class _Rounds(sim.SimServers):
    """Each race round's shared server: when it started and ended, in simulated time."""

    spans: list[tuple[float, float]] = []  # noqa: RUF012

    @contextmanager
    def serve_all(self, candidates: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        start = self.now
        with super().serve_all(candidates, *args, **kwargs) as server:
            yield server
        type(self).spans.append((start, self.now))


def _race_beside_the_last_trials() -> tuple[list[tuple[float, float]], list[float], float]:
    """Four workers, 12 trials at most: the race rounds' spans, when each trial ended, and when
    the race ended (before the open-loop check)."""
    ends: list[float] = []

    class Ends(Trials):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            clock = self.clock

            class Told(Events):
                def trial_finished(self, result: Any) -> None:
                    ends.append(clock())

            self.events = Told()

    _Rounds.spans = []
    out = sim.simulate(QUIET, seed=2, max_trials=12, at_once=4, servers_type=_Rounds, trials_type=Ends)
    assert out.honest and out.winner is not None and len(ends) == 12
    return sorted(_Rounds.spans), ends, out.sim_s - out.checked_s  # the race's end


def test_the_workers_the_search_leaves_free_while_it_waits_begin_the_race() -> None:
    """Four workers: while the search waits for its trials in flight, a free worker begins a race
    round (finals.ahead) before the trials budget is spent, and the race goes on from it."""
    spans, ends, _ = _race_beside_the_last_trials()
    assert spans[0][0] < sorted(ends)[-3], (spans, ends)  # three trials were still to end


def test_a_race_round_begins_when_a_worker_frees_not_when_the_slowest_round_ends() -> None:
    """Four workers: a round begins while rounds begun before it are in flight (no waves)."""
    spans, _, _ = _race_beside_the_last_trials()
    assert any(start < max(end for _, end in spans[:i]) for i, (start, _) in enumerate(spans) if i), spans


def test_once_the_race_is_decided_its_rounds_still_in_flight_end_there() -> None:
    """Four workers: rounds begun while the race needed them end once it is decided
    (Workers.drop), so the run ends before the last of them would have."""
    spans, _, wall = _race_beside_the_last_trials()
    assert max(end for _, end in spans) > wall, (spans, wall)


def test_race_rounds_are_taken_in_the_order_they_began(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four workers on a noisy surface: a round near the limit takes more windows, so rounds taken
    as they end would decide on those far from it first. Each race takes its rounds in the order
    they began, but for a round begun a level down (:meth:`Race.below`): it waits for its leader."""
    from autotune import finals
    from autotune.search import racing

    begun: list[Any] = []  # each round's job, as it began
    taken: dict[int, list[int]] = {}  # each race's rounds taken: their places in ``begun``
    serve, take = finals.serve_round, racing.Race.take_ended

    def serving(trials: Trials, job: Any) -> Any:
        begun.append(job)
        return serve(trials, job)

    def taking(self: Any, at: Any, *args: Any, **kwargs: Any) -> None:
        taken.setdefault(id(self), []).append(next(i for i, job in enumerate(begun) if job.levels is at))
        take(self, at, *args, **kwargs)

    monkeypatch.setattr(finals, "serve_round", serving)
    monkeypatch.setattr(racing.Race, "take_ended", taking)
    noisy = sim.Synthetic("noisy", QUIET.sla, mu=400.0, cores=2, alpha=0.4, cv=0.1)
    out = sim.simulate(noisy, seed=4, max_trials=12, at_once=4)
    assert out.winner is not None and sum(map(len, taken.values())) > 4
    down = {i for i, job in enumerate(begun) if job.levels != job.above}
    in_order = [[i for i in places if i not in down] for places in taken.values()]
    assert all(places == sorted(places) for places in in_order), taken


def _race_rounds_on_noisy_surfaces(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], list[Any]]:
    """Four workers, a noisy surface, four runs: the race rounds begun, those dropped one by one
    (Workers.drop with the jobs named), and the levels of those taken (Race.take_ended)."""
    from autotune import finals
    from autotune.search import racing

    begun: list[Any] = []
    dropped: list[Any] = []
    taken: list[Any] = []
    serve, take, drop = finals.serve_round, racing.Race.take_ended, sim.SimWorkers.drop

    def serving(trials: Trials, job: Any) -> Any:
        begun.append(job)
        return serve(trials, job)

    def taking(self: Any, at: Any, *args: Any, **kwargs: Any) -> None:
        taken.append(at)
        take(self, at, *args, **kwargs)

    def dropping(self: Any, jobs: Any = None) -> None:
        dropped.extend(jobs or [])
        drop(self, jobs)

    monkeypatch.setattr(finals, "serve_round", serving)
    monkeypatch.setattr(racing.Race, "take_ended", taking)
    monkeypatch.setattr(sim.SimWorkers, "drop", dropping)
    noisy = sim.Synthetic("noisy", Sla(95, 12.0), mu=400.0, cores=2, alpha=0.4, cv=0.1)
    for seed in range(4):
        assert sim.simulate(noisy, seed=seed, max_trials=12, at_once=4).winner is not None
    return begun, dropped, taken


def test_a_round_the_race_can_never_take_ends_and_is_never_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Race.stale: a round whose finalists all left its level ends on its own (Workers.drop of
    that job), and its points are never taken."""
    _, dropped, taken = _race_rounds_on_noisy_surfaces(monkeypatch)
    assert dropped, "no round was dropped on its own"
    assert not any(job.levels is at for job in dropped for at in taken)


def test_a_round_begun_a_level_down_is_taken_once_the_leader_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Race.below: a worker the race leaves free begins the leader's round a level down, and some
    such round is taken there."""
    begun, _, taken = _race_rounds_on_noisy_surfaces(monkeypatch)
    below = [job for job in begun if job.levels != job.above]
    assert below and all(job.levels[n] <= job.above[n] for job in below for n in job.levels)
    assert any(job.levels is at for job in below for at in taken), below
