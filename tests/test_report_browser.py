"""The rendered report: offline, escaped, and drawn by a real headless Chromium.

The page checks (no CDN, escaping) run everywhere; the ``browser`` ones open the page in
Chromium (``apt-get install -y chromium``), dump its DOM after scripts ran, and take a
screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import plotly.offline
import pytest

from autotune.gpu import GpuFigures
from autotune.objective import Scoring, Sla
from autotune.points import UNSTABLE, Measurement, Point, ServerBreakdown
from autotune.report import render_html, report_data, write_report
from autotune.report._render import diff_lines, script_json
from autotune.results import COMPLETE, FAIL, PRUNED, RunInfo, TrialResult, Verification
from autotune.search_space import Candidate, params_of

EVIL_MODEL = "<script>alert(1)</script>"
EVIL_KIND = "KIND_</script><script>alert(2)</script>"  # reaches the plot JSON through the label
SLA = Sla(percentile=95, limit_ms=20.0)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


# ---------------------------------------------------------------- a small run


def _point(c: int, throughput: float, p95: float, batches: dict[int, int], queue_us: float) -> Point:
    return Point(
        concurrency=c, request_rate=0.0, throughput=throughput, avg_ms=p95 * 0.62, p50_ms=p95 * 0.55,
        p90_ms=p95 * 0.9, p95_ms=p95, p99_ms=p95 * 1.25, requests=int(throughput * 5), errors=0,
        duration_s=5.0, windows=3, stable=True,
        server=ServerBreakdown(queue_us=queue_us, compute_input_us=40.0, compute_infer_us=1800.0 + 90 * c,
                               compute_output_us=25.0, requests=1000, executions=400, batch_sizes=batches),
    )  # fmt: skip


def _candidate(count: int, mbs: int, batching: bool, pref: tuple[int, ...] = (), delay: int = 0) -> Candidate:
    return Candidate(
        instance_count=count, kind="KIND_CPU", gpus=(), max_batch_size=mbs, dynamic_batching=batching,
        preferred_batch_sizes=pref, max_queue_delay_us=delay, trt_fp16=False,
    )  # fmt: skip


def _trial(
    number: int, cand: Candidate, curve: list[tuple[int, float, float]], *, baseline: bool = False
) -> TrialResult:
    batches = {1: 50} if cand.max_batch_size <= 1 else {1: 20, 2: 35, 4: 60, 8: 25}
    points = tuple(_point(c, t, p, batches, queue_us=120.0 * c) for c, t, p in curve)
    best = max((p for p in points if SLA.met_by(p)), key=lambda p: p.throughput, default=None)
    if best is not None and number == 2:
        best = Point(**{**best.__dict__, "warnings": (UNSTABLE,)})
        points = tuple(best if p.concurrency == best.concurrency else p for p in points)
    return TrialResult(
        number=number, state=COMPLETE, candidate=cand, params=params_of(cand), baseline=baseline,
        measurement=Measurement(points=points, best=best), duration_s=41.0 + number,
    )  # fmt: skip


def sample() -> tuple[RunInfo, list[TrialResult]]:
    evil = Candidate(**{**_candidate(2, 4, False).__dict__, "kind": EVIL_KIND})
    trials = [
        _trial(0, _candidate(1, 0, False), [(1, 210, 6.1), (2, 330, 9.8), (4, 360, 19.0), (8, 365, 38.0)],
               baseline=True),
        _trial(1, _candidate(2, 8, True, (4, 8), 500), [(1, 230, 5.8), (2, 420, 7.2), (4, 690, 11.4),
                                                         (8, 910, 21.6), (6, 800, 15.5)]),
        _trial(2, _candidate(3, 16, True, (), 100), [(1, 240, 5.5), (2, 450, 6.9), (4, 760, 10.2),
                                                      (8, 1040, 16.8), (16, 1130, 29.0)]),
        _trial(3, evil, [(1, 1150, 22.0), (2, 1300, 31.0)]),
        TrialResult(
            number=4, state=FAIL, candidate=_candidate(4, 32, True, (32,), 2000), baseline=False,
            params=params_of(_candidate(4, 32, True, (32,), 2000)), measurement=None,
            reason="model 'm' never became ready within 120 s <killed>",
            log_tail="I1122 model_lifecycle.cc:469] loading: m:1\nE1122 backend: <out of memory> & more\n",
            duration_s=125.0,
        ),
    ]  # fmt: skip
    verification = Verification(
        trial=2, concurrency=8, sla_met=3,
        points=tuple(_point(8, t, p, {4: 60}, 900.0) for t, p in ((1030, 16.9), (1045, 16.6), (1038, 17.1))),
    )  # fmt: skip
    diff = (
        '--- a/config.pbtxt\n+++ b/config.pbtxt\n@@ -1,4 +1,9 @@\n name: "m"\n-max_batch_size: 0\n'
        "+max_batch_size: 16\n+dynamic_batching {\n+  max_queue_delay_microseconds: 100\n+}\n"
        " instance_group {\n-  count: 1\n+  count: 3\n"
    )
    run = RunInfo(
        run_id="2025-11-22T07-50-00-ab12", model=EVIL_MODEL, sla=SLA, launcher="local (pytriton 0.7.0)",
        original_config='name: "m"\nmax_batch_size: 0\ninstance_group { count: 1 kind: KIND_CPU }\n',
        started="2025-11-22T07:50:00", finished="2025-11-22T08:04:12", winner=2,
        winner_config='name: "m"\nmax_batch_size: 16\ndynamic_batching {\n'
        "  max_queue_delay_microseconds: 100\n}\ninstance_group { count: 3 kind: KIND_CPU }\n",
        winner_diff=diff, verifications=(verification,),
    )  # fmt: skip
    return run, trials


def gpu_sample() -> tuple[RunInfo, list[TrialResult]]:
    """The small run on two GPUs (docker, --gpus 0,1): each point with both GPUs' figures (more
    memory with more instances), a GPU memory limit in the SLA, goodput compared per GPU."""

    def on_gpus(t: TrialResult) -> TrialResult:
        if t.measurement is None or t.candidate is None:
            return t
        count = t.candidate.instance_count
        figures = tuple(
            GpuFigures(
                f"GPU-{i}", min(0.2 * count + 0.1 * i, 1.0), 1500.0 * count + 300 * i, 90.0 + 40 * count
            )
            for i in (0, 1)
        )
        points = tuple(replace(p, gpus=figures) for p in t.measurement.points)
        best = next((q for p, q in zip(t.measurement.points, points, strict=True) if p == t.best), None)
        return replace(t, measurement=Measurement(points, best))

    run, trials = sample()
    run = replace(
        run, sla=Sla(95, 20.0, 6000.0), docker_gpus="0,1", launcher="docker",
        scoring=Scoring(per_gpu=True, server_gpus=2), verifications=(),
    )  # fmt: skip
    return run, [on_gpus(t) for t in trials]


# ---------------------------------------------------------------- the page, without a browser


@pytest.fixture(scope="module")
def page() -> str:
    run, trials = sample()
    return render_html(report_data(run, trials))


def test_page_is_self_contained(page: str) -> None:
    parsed = _Dom()
    parsed.feed(page)
    assert parsed.external == []  # no src=, href= or <link>: nothing to fetch
    ours = page.replace(plotly.offline.get_plotlyjs(), "")  # plotly.js names its CDN for geo maps only
    assert "http" not in ours.replace("http-equiv", "") and "@import" not in ours and "url(" not in ours
    assert [kind for kind, _ in parsed.scripts].count("") == 2  # plotly.js inline, then ours


def test_user_strings_are_escaped(page: str) -> None:
    assert EVIL_MODEL not in page and "alert(2)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;out of memory&gt; &amp; more" in page and "&lt;killed&gt;" in page


def test_plot_json_cannot_close_its_script_element(page: str) -> None:
    blocks = re.findall(r'<script type="application/json" data-plot="[^"]+">(.*?)</script>', page, re.S)
    assert len(blocks) == 4  # pareto, latency vs load, server, batch
    assert all("<" not in b and ">" not in b for b in blocks)
    # the evil label is there, HTML-escaped for plotly's text, then JSON-escaped
    assert any("alert(2)" in b and "\\u0026lt;" in b for b in blocks)
    assert script_json('{"a": "</script>&"}') == '{"a": "\\u003c/script\\u003e\\u0026"}'


def test_verification_table_shows_median_and_worst_latency(page: str) -> None:
    table = page.split('id="verifications"')[1].split("</table>")[0]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert heads[-2:] == ["median p95 ms", "worst p95 ms"]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table.split("<tbody>")[1])
    assert cells[-2:] == ["16.90", "17.10"]  # repeats at p95 16.9, 16.6 and 17.1 ms


def test_diff_lines_are_classed_and_escaped() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a <b>\n+c & d\n same\n"
    assert [cls for cls, _ in diff_lines(diff)] == ["file", "file", "hunk", "del", "add", "ctx"]
    assert diff_lines(" \n") == []  # the winner is the original: nothing to show
    run, trials = sample()
    page = render_html(report_data(replace(run, winner_diff=diff), trials))
    out = page.split('<pre class="diff">')[1].split("</pre>")[0]
    assert '<span class="file">--- a/x</span>' in out and '<span class="hunk">@@ -1 +1 @@</span>' in out
    assert '<span class="del">-a &lt;b&gt;</span>' in out and '<span class="add">+c &amp; d</span>' in out
    assert '<span class="ctx"> same</span>' in out
    assert "</span>\n" not in out  # nothing between the lines' spans: a <pre> would show it


def test_a_run_with_nothing_measured_still_renders() -> None:
    _, trials = sample()
    bare = RunInfo(
        run_id="r", model="m", sla=SLA, launcher="local", original_config="name: 'm'\n", started="t"
    )
    empty = render_html(report_data(bare, []))
    assert "no trials yet" in empty and "no operating point was measured" in empty
    assert 'data-plot="' not in empty and "Original config.pbtxt" in empty
    only_failed = render_html(report_data(bare, [t for t in trials if t.state == FAIL]))
    assert "none yet" in only_failed and "server log (last lines)" in only_failed


def test_a_reused_trial_says_why_it_was_not_measured() -> None:
    run, trials = sample()
    again = replace(
        trials[1], number=5, state=PRUNED, measurement=None, reused_from=1, reason="same as trial 1"
    )
    why = "1 instance(s) lost without dynamic batching (trial 0 against 1) & <b>"
    other = replace(again, number=6, candidate=_candidate(1, 16, True), reused_from=2, reason=why)
    html = render_html(report_data(run, [*trials, again, other]))
    assert "not measured: same as trial 1" in html and "2 not measured" in html
    assert "not measured: 1 instance(s) lost" in html and "&amp; &lt;b&gt;" in html


def test_a_run_with_gpu_figures_shows_them_the_limit_and_the_gpus_it_was_given() -> None:
    run, trials = gpu_sample()
    page = render_html(report_data(run, trials))
    assert 'id="fig-gpu"' in page and 'data-plot="fig-gpu"' in page
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", page.split('id="trials"')[1].split("</thead>")[0])
    assert heads[-5:] == ["per GPU /s", "GPU util %", "GPU MiB peak", "GPU W", "time s"]
    assert "GPUs (docker --gpus) <b>0,1</b>" in page and "goodput per GPU used" in page
    assert "p95 ≤ 20 ms, GPU memory ≤ 6000 MiB" in page
    assert "Gain per GPU vs baseline" in page
    assert "1,040.0 per GPU (CPU instances, counted as one)" in page  # the winner: 3 CPU instances


def test_write_report_writes_both_files(tmp_path: Path) -> None:
    run, trials = sample()
    path = write_report(run, trials, tmp_path / "reports")
    assert path == tmp_path / "reports" / "report.html" and path.stat().st_size > 1_000_000
    assert (tmp_path / "reports" / "trials.csv").read_text(encoding="utf-8").count("\n") == 1 + len(trials)
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.html", "trials.csv"]


# ---------------------------------------------------------------- in Chromium


def _find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _find_chromium()
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, timeout=900, check=False
        )
        found = _find_chromium()
    if found is None:
        pytest.skip(f"no Chromium found ({', '.join(CHROMIUM_NAMES)}) and 'apt-get install chromium' failed")
    return found


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run, trials = sample()
    return write_report(run, trials, tmp_path_factory.mktemp("report"))


def _headless(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
    ]  # fmt: skip
    return subprocess.run([chromium, *flags, *args], capture_output=True, text=True, timeout=180, check=False)


class _Dom(HTMLParser):
    """Script bodies, the <h1> text and each element's classes by id."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[str, str]] = []  # (type, body)
        self.h1 = ""
        self.classes: dict[str, str] = {}
        self.main_svgs = 0
        self.external: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.classes[a["id"] or ""] = a.get("class") or ""
        self.external += [f"{tag} {k}={v}" for k, v in attrs if k in ("src", "href") or tag == "link"]
        self.main_svgs += tag == "svg" and "main-svg" in (a.get("class") or "").split()
        if tag in ("script", "h1"):
            self._in = tag
            if tag == "script":
                self.scripts.append((a.get("type") or "", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            kind, body = self.scripts[-1]
            self.scripts[-1] = (kind, body + data)
        elif self._in == "h1":
            self.h1 += data


@pytest.fixture(scope="module")
def dom(chromium: str, report_file: Path, tmp_path_factory: pytest.TempPathFactory) -> _Dom:
    done = _headless(chromium, tmp_path_factory.mktemp("profile"), "--dump-dom", report_file.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = _Dom()
    parsed.feed(done.stdout)
    return parsed


@pytest.mark.browser
def test_plotly_drew_every_chart(dom: _Dom) -> None:
    for target in ("fig-pareto", "fig-load", "fig-server", "fig-batch"):
        assert "js-plotly-plot" in dom.classes.get(target, ""), f"{target} was not drawn"
    assert dom.main_svgs >= 8  # plotly draws two main-svg layers per chart


@pytest.mark.browser
def test_plotly_drew_the_gpu_panel(chromium: str, tmp_path: Path) -> None:
    run, trials = gpu_sample()
    report = write_report(run, trials, tmp_path / "gpu")
    done = _headless(chromium, tmp_path / "profile", "--dump-dom", report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = _Dom()
    parsed.feed(done.stdout)
    for target in ("fig-pareto", "fig-load", "fig-server", "fig-batch", "fig-gpu"):
        assert "js-plotly-plot" in parsed.classes.get(target, ""), f"{target} was not drawn"


@pytest.mark.browser
def test_the_evil_model_name_is_text_not_a_script(dom: _Dom) -> None:
    assert EVIL_MODEL in dom.h1
    kinds = [kind for kind, _ in dom.scripts]
    assert kinds.count("application/json") == 4 and len(kinds) == 6  # 4 figures, plotly.js, ours
    code = [body for kind, body in dom.scripts if kind != "application/json"]
    assert not any("alert(1)" in body or "alert(2)" in body for body in code)


@pytest.fixture(scope="module")
def screenshot(chromium: str, report_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("shot") / "report.png"
    done = _headless(
        chromium, tmp_path_factory.mktemp("profile"), f"--screenshot={out}", "--window-size=1400,2400",
        report_file.as_uri(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    keep = os.environ.get("AUTOTUNE_KEEP_SCREENSHOT")
    if keep:
        shutil.copyfile(out, keep)
    yield out


@pytest.mark.browser
def test_screenshot_is_not_blank(screenshot: Path) -> None:
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 100_000, f"screenshot is only {len(data)} bytes: the page looks empty"
