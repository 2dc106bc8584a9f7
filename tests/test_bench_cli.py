"""`autotune bench`: bad input is one line and exit 2 before anything is measured; on a real
tritonserver it prints the table and writes the CSV and JSON it was asked for."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.bench import COLUMNS, _levels
from autotune.cli import main
from autotune.launch import Server
from autotune.launch.local import LocalLauncher
from tests.conftest import fast_toy_repo

BAD = [
    (["--concurrency", "0"], "expected positive N"),
    (["--concurrency", "4:1"], "END 1 is below START 4"),
    (["--concurrency", "1:x"], "expected N or START:END[:STEP]"),
    (["--concurrency", "1:8:2:1"], "expected positive N"),
    (["--request-rate", "-5"], "expected positive N"),
    (["--concurrency", "2", "--request-rate", "5"], "not allowed with argument"),
    (["--distribution", "uniform"], "invalid choice"),
    (["--protocol", "smtp"], "invalid choice"),
    (["--url", "localhost"], "--url must be HOST:PORT"),
    (["--url", "h:99999"], "--url must be HOST:PORT"),
    (["--grpc-url", "other:8001"], "same host"),
    (["--shape", "x:2,zero"], "--shape must be NAME:D1,D2"),
    (["--shape", "2,3"], "--shape must be NAME:D1,D2"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--window", "0"], "--window must be > 0"),
    (["--stability-percentage", "0"], "--stability-percentage must be > 0"),
    (["--max-windows", "2"], "--max-windows must be >= 3"),
    (["--workers", "0"], "--workers must be > 0"),
    (["--input-data", "/nonexistent/data.json"], "no such file"),
    (["--request-intervals", "/nonexistent/intervals.txt"], "cannot read"),
    (["--request-intervals", "{tmp}/empty.txt"], "no intervals"),
    (["--request-intervals", "{tmp}/words.txt"], "line 1: 'soon'"),
    (["--request-intervals", "{tmp}/empty.txt", "--concurrency", "2"], "not allowed with argument"),
    (["--request-intervals", "{tmp}/empty.txt", "--request-rate", "2"], "not allowed with argument"),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad_input_is_one_line_and_exit_2(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "words.txt").write_text("soon\n")
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    code = main(["bench", "--model", "toy", "--url", "127.0.0.1:1", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("autotune: error:")
    assert message in err


def test_levels_are_additive_ranges() -> None:
    assert _levels("1:16:5", "--concurrency", int) == (1, 6, 11, 16)
    assert _levels("8", "--concurrency", int) == (8,)
    assert _levels("50:200:50", "--request-rate", float) == (50.0, 100.0, 150.0, 200.0)
    assert _levels("0.5:1.5:0.5", "--request-rate", float) == (0.5, 1.0, 1.5)


# ---------------------------------------------------------------- on a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = fast_toy_repo(tmp_path_factory.mktemp("server"))
    with LocalLauncher().serve(repo, "toy", repo.parent / "server.log") as handle:
        yield handle


def _bench(server: Server, *extra: str) -> int:
    return main(
        [
            "bench",
            "--model",
            "toy",
            "--url",
            server.http_url,
            "--grpc-url",
            server.grpc_url,
            "--window",
            "0.5",
            "--max-windows",
            "4",
            *extra,
        ]
    )


@pytest.mark.integration
def test_bench_closed_loop_table_csv_json(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_csv, out_json = tmp_path / "levels.csv", tmp_path / "levels.json"
    code = _bench(
        server, "--protocol", "grpc", "--concurrency", "1:3:2", "--csv", str(out_csv), "--json", str(out_json)
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "toy over grpc" in captured.out and "p95 ms" in captured.out and "c.infer us" in captured.out
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["concurrency"] for r in rows] == ["1", "3"] and list(rows[0]) == list(COLUMNS)
    assert all(float(r["throughput"]) > 0 and float(r["p50_ms"]) <= float(r["p99_ms"]) for r in rows)
    doc = json.loads(out_json.read_text())
    assert doc["mode"] == "concurrency" and doc["protocol"] == "grpc" and len(doc["points"]) == 2
    assert doc["points"][1]["server"]["requests"] > 0


@pytest.mark.integration
def test_bench_request_rate_with_input_data(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"x": {"content": list(range(16)), "shape": [16]}}]}))
    out_json = tmp_path / "rate.json"
    code = _bench(
        server,
        "--request-rate",
        "40:80:40",
        "--distribution",
        "poisson",
        "--input-data",
        str(data),
        "--batch-size",
        "2",
        "--json",
        str(out_json),
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "req/s asked" in captured.out and "sent/s" in captured.out
    doc = json.loads(out_json.read_text())
    assert doc["mode"] == "request_rate" and [lv["request_rate"] for lv in doc["levels"]] == [40.0, 80.0]
    assert all(lv["send_rate"] > 0 and lv["errors"] == 0 for lv in doc["levels"])
    assert all(p["server"]["batch_sizes"] for p in doc["points"])


@pytest.mark.integration
def test_bench_replays_a_recorded_arrival_pattern(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    intervals = tmp_path / "intervals.txt"
    intervals.write_text("5000\n0\n15000\n")  # 3 requests per 20 ms: 150/s, in pairs
    out_json = tmp_path / "replay.json"
    code = _bench(server, "--request-intervals", str(intervals), "--json", str(out_json))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(out_json.read_text())
    assert doc["mode"] == "request_intervals" and doc["distribution"] == "intervals"
    (level,) = doc["levels"]
    assert level["request_rate"] == pytest.approx(150.0) and level["errors"] == 0
    assert level["send_rate"] == pytest.approx(150.0, rel=0.1)


@pytest.mark.integration
def test_bench_unknown_model_is_bad_input(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--model", "nope", "--url", server.http_url])
    err = capsys.readouterr().err
    assert code == 2 and "model 'nope' is not loaded" in err and len(err.strip().splitlines()) == 1
