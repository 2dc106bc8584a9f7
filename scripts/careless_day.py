"""A careless day, probed: each way an ordinary day goes wrong for a user of autotune, tried
with the real tool on the toy model (tests/models/toy, a real tritonserver), one row each.

    python scripts/careless_day.py                 # every case, a table, exit 1 if a row is wrong
    python scripts/careless_day.py errors paths    # only these cases (names: --list)
    python scripts/careless_day.py --keep DIR      # work in DIR and leave it for a look

Each case runs ``python -m autotune.cli`` in processes of its own, as a user would type it,
and says what it saw; a case that cannot be tried here (a mount needs root) says so. After
the cases the probe checks that nothing is left: no tritonserver or python backend stub that
was not running before, no mount under its folder, no stage of its runs. ``tests/test_careless_day.py``
runs every case, one test each.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import difflib
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "models" / "toy"
CLI = [sys.executable, "-m", "autotune.cli"]
SPACE = """instance_group:
  count: [1, 2]
max_batch_size: [8]
dynamic_batching:
  enabled: [true, false]
  max_queue_delay_microseconds: [0]
load:
  concurrency: {min: 1, max: 16}
"""


class Wrong(Exception):
    """The case went wrong: what was seen."""


class Skipped(Exception):
    """The case cannot be tried here: why."""


@dataclass(frozen=True)
class Done:
    """A finished command: its exit code, output and time."""

    code: int
    out: str
    err: str
    seconds: float

    def line(self, prefix: str = "autotune: error: ") -> str:
        """The first line of stderr that starts with ``prefix``, without it ("" when none does)."""
        found = next((x for x in self.err.splitlines() if x.startswith(prefix)), "")
        return found.removeprefix(prefix)


@dataclass
class Probe:
    """One case's folder (a copy of the toy model, a small search space) and its commands."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.repo = self.toy(self.root / "repo")
        self.space = self.root / "space.yaml"
        self.space.write_text(SPACE, encoding="utf-8")
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")),
            "AUTOTUNE_LOCK_FILE": str(self.root / "measure.lock"),  # this probe's machine lock
            **self.env,
        }

    def toy(self, repo: Path, **params: str) -> Path:
        """A repository at ``repo`` holding the toy model, with extra config parameters."""
        shutil.copytree(TOY, repo / "toy", ignore=shutil.ignore_patterns("__pycache__"))
        config = repo / "toy" / "config.pbtxt"
        extra = "".join(
            f'parameters {{\n  key: "{k}"\n  value {{ string_value: "{v}" }}\n}}\n' for k, v in params.items()
        )
        config.write_text(config.read_text(encoding="utf-8") + extra, encoding="utf-8")
        return repo

    def run_args(self, *extra: str, repo: Path | None = None, reports: Path | None = None) -> list[str]:
        """``autotune run`` on the toy model, as short as a run gets: one trial, no finalist
        (a case that needs more says so; a flag given twice, the last counts)."""
        return [
            "run", "--model", "toy", "--model-repository", str(repo or self.repo), "--sla-p95-ms", "60",
            "--reports-dir", str(reports or self.root / "reports"), "--search-space", str(self.space),
            "--window", "0.5", "--finalists", "0", "--no-open-loop-check", "--max-trials", "1", *extra,
        ]  # fmt: skip

    def autotune(
        self,
        *args: str,
        timeout: float = 600,
        cwd: Path | None = None,
        limit_files: tuple[int, int] | None = None,
    ) -> Done:
        """``autotune ARGS`` as a user types it; ``limit_files``: its open-file limit (soft, hard;
        -1 keeps that one), as ``ulimit -n`` sets it."""
        start = time.monotonic()
        done = subprocess.run(
            [*CLI, *args], env=self.env, cwd=cwd or self.root, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
            preexec_fn=None if limit_files is None else partial(_limit_files, *limit_files),
        )  # fmt: skip
        return Done(done.returncode, done.stdout, done.stderr, time.monotonic() - start)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*CLI, *args], env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    def runs(self, reports: Path | None = None) -> list[Path]:
        """The run directories under ``reports`` (default the probe's), oldest first."""
        return sorted((reports or self.root / "reports").glob("toy/*/run.json"), key=lambda p: p.parent.name)

    def finished_run(self, *extra: str) -> Path:
        """A run that finished with a winner."""
        done = self.autotune(*self.run_args(*extra))
        expect(done.code == 0, f"a plain run failed (exit {done.code}): {done.err[-500:]}")
        return self.runs()[-1].parent


def _limit_files(soft: int, hard: int) -> None:
    """In the child before it runs: the open-file limit as ``ulimit -n`` would set it."""
    now_soft, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (soft if soft >= 0 else now_soft, hard if hard >= 0 else now_hard)
    )


def expect(ok: bool, saw: str) -> None:
    if not ok:
        raise Wrong(saw)


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise Wrong(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> Done:
    """The command's end; one that does not end in ``timeout`` s is a wrong row that shows
    where each of its threads was (autotune dumps their stacks on SIGUSR2), then is killed."""
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGUSR2)
            time.sleep(2.0)
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        raise Wrong(f"still running after {timeout:.0f} s; its threads then:\n{err[-4000:]}") from None
    return Done(proc.returncode, out, err, time.monotonic() - start)


def record(run_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    return data


def tree_digest(folder: Path) -> str:
    """Every path under ``folder`` and every file's bytes, as one digest."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@contextmanager
def mounted(where: Path, *options: str, source: str = "tmpfs", kind: str = "tmpfs") -> Iterator[Path]:
    """A mount at ``where`` for the block, always taken down (root only: else Skipped)."""
    if os.geteuid() != 0:
        raise Skipped("needs root to mount")
    where.mkdir(parents=True, exist_ok=True)
    command = ["mount", "-t", kind, "-o", ",".join(options), source, str(where)]
    if kind == "bind":
        command = ["mount", "--bind", source, str(where)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:  # root in a container that may not mount
        raise Skipped(f"cannot mount here: {done.stderr.strip()[:200]}")
    try:
        if kind == "bind" and "ro" in options:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True, capture_output=True)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


# ---------------------------------------------------------------- the cases


def two_runs(p: Probe) -> str:
    """A second run while one measures refuses at once, naming the first and its pid."""
    first = p.start(*p.run_args())
    try:
        wait_for(lambda: p.runs(), 120, "the first run's directory")
        second = p.autotune(*p.run_args(reports=p.root / "second"))
    finally:
        done = finish(first)
    expect(done.code == 0, f"the first run failed: {done.err[-300:]}")
    line = second.line()
    run_dir = str(p.runs()[0].parent)
    expect(second.code == 2, f"exit {second.code}: {second.err[-300:]}")
    expect(f"pid {first.pid}" in line and run_dir in line, f"not named: {line}")
    expect(not (p.root / "second").exists(), "the second run wrote its folder")
    return f"exit 2 in {second.seconds:.1f} s: {line[:110]}"


def two_runs_wait(p: Probe) -> str:
    """With --wait, the second run waits for the first, then measures alone."""
    first = p.start(*p.run_args())
    try:
        wait_for(lambda: p.runs(), 120, "the first run's directory")
        second = p.autotune(*p.run_args("--wait", reports=p.root / "second"))
    finally:
        done = finish(first)
    expect(done.code == 0 and second.code == 0, f"exits {done.code}, {second.code}: {second.err[-300:]}")
    expect("waiting for autotune run (pid" in second.err, "no waiting line")
    (one,), (two,) = p.runs(), p.runs(p.root / "second")
    ended, began = str(record(one.parent)["finished"]), str(record(two.parent)["started"])
    expect(began >= ended, f"overlap: the second started {began}, the first finished {ended}")
    return f"the second waited {second.seconds:.0f} s, started {began[11:19]} after {ended[11:19]}"


def bench_during_run(p: Probe) -> str:
    """`autotune bench` refuses while a run measures."""
    first = p.start(*p.run_args())
    try:
        wait_for(lambda: p.runs(), 120, "the run's directory")
        bench = p.autotune("bench", "--model", "toy", "--url", "127.0.0.1:1")
    finally:
        finish(first)
    expect(bench.code == 2 and f"pid {first.pid}" in bench.line(), f"exit {bench.code}: {bench.err[-300:]}")
    return f"exit 2: {bench.line()[:100]}"


def killed_lock(p: Probe) -> str:
    """A run killed with -9 leaves no lock behind: the next one starts at once."""
    first = p.start(*p.run_args())
    wait_for(lambda: p.runs(), 120, "the run's directory")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    second = p.autotune(*p.run_args("--fresh", reports=p.root / "second"))
    expect(second.code == 0, f"exit {second.code}: {second.err[-300:]}")
    expect("is measuring" not in second.err, "refused by a dead run's lock")
    return f"the next run ran at once (exit 0, {second.seconds:.0f} s)"


def errors(p: Probe) -> str:
    """A model that answers every third request with an error: no winner, exit 4 naming it;
    trials.csv gives the error rate and the server's first error; no empty stage/ left."""
    repo = p.toy(p.root / "erring", error_every="3")
    done = p.autotune(*p.run_args(repo=repo))
    line = done.line()
    expect(done.code == 4, f"exit {done.code}: {done.err[-400:]}")
    expect("errors" in line and "toy model told to fail" in line, f"the error not named: {line}")
    run_dir = p.runs()[-1].parent
    with (run_dir / "trials.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    expect(
        all(r["state"] == "FAIL" and "toy model told to fail" in r["reason"] for r in rows), f"rows: {rows}"
    )
    expect(not (run_dir / "stage").exists(), "a stage/ folder was left in the run directory")
    return f"exit 4: {line[:110]}"


def resume_line(p: Probe) -> str:
    """Ctrl-C prints a line that, pasted as printed, resumes with the run's own budget and
    workload and measures the interrupted config first."""
    args = p.run_args("--max-trials", "3", "--patience", "0", "--input-data", "zero", "--batch-size", "2")
    proc = p.start(*args)
    wait_for(lambda: list(p.root.glob("reports/toy/*/logs/trial-001.log")), 300, "the second trial")
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)
    stopped = finish(proc)
    expect(stopped.code == 130, f"exit {stopped.code} on Ctrl-C")
    found = re.search(r"continue with: (.+)$", stopped.err, re.MULTILINE)
    expect(found is not None, f"no resume line: {stopped.err[-300:]}")
    assert found is not None
    typed = shlex.split(found.group(1))
    expect(typed[0] == "autotune", f"not a command: {found.group(1)}")
    again = p.autotune(*typed[1:])
    expect(again.code == 0, f"the printed line failed (exit {again.code}): {again.err[-300:]}")
    trials = _trials(p.runs()[-1].parent)
    interrupted = [t for t in trials if t["interrupted"]]
    counted = [t for t in trials if not t["interrupted"]]
    expect(
        len(interrupted) == 1 and len(counted) == 3, f"trials: {[(t['number'], t['state']) for t in trials]}"
    )
    after = trials[trials.index(interrupted[0]) + 1 :]
    expect(after[0]["params"] == interrupted[0]["params"], "the interrupted config was not measured first")
    options = record(p.runs()[-1].parent)["options"]
    expect(isinstance(options, dict) and options["max_trials"] == 3, f"options: {options}")
    return f"`{found.group(1)[:60]}...` resumed: 3 trials, the interrupted one first"


def killed_resume(p: Probe) -> str:
    """After kill -9, a resume measures the interrupted config before the queued seeds."""
    proc = p.start(*p.run_args("--max-trials", "3", "--patience", "0"))
    wait_for(lambda: list(p.root.glob("reports/toy/*/logs/trial-001.log")), 300, "the second trial")
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    run_dir = p.runs()[-1].parent
    again = p.autotune("run", "--resume", str(run_dir))
    expect(again.code == 0, f"exit {again.code}: {again.err[-300:]}")
    trials = _trials(run_dir)
    (interrupted,) = [t for t in trials if t["interrupted"]]
    after = trials[trials.index(interrupted) + 1 :]
    expect(bool(after) and after[0]["params"] == interrupted["params"], "not measured first")
    return f"trial {interrupted['number']} measured again as trial {after[0]['number']}, first"


def storage(p: Probe) -> str:
    """A bad --storage leaves nothing; the same command without it starts a new run."""
    bad = p.autotune(*p.run_args("--storage", "foo://bar"))
    expect(bad.code == 5, f"exit {bad.code}: {bad.err[-300:]}")
    expect(not p.runs(), "a run directory was left behind")
    good = p.autotune(*p.run_args())
    expect(good.code == 0 and "resuming" not in good.err, f"exit {good.code}: {good.err[-300:]}")
    return f"exit 5 ({bad.line()[:80]}), nothing left; then a new run"


def paths(p: Probe) -> str:
    """A space and non-ASCII letters in the repository's, the reports' and the cache's paths;
    the user's repository byte for byte as it was (no __pycache__)."""
    p.env["XDG_CACHE_HOME"] = str(p.root / "my cache ö")
    repo = p.toy(p.root / "my models ü")
    reports = p.root / "my reports é"
    before = tree_digest(repo)
    done = p.autotune(*p.run_args(repo=repo, reports=reports))
    expect(done.code == 0, f"exit {done.code}: {done.err[-400:]}")
    expect(tree_digest(repo) == before, f"the repository changed: {sorted(str(x) for x in repo.rglob('*'))}")
    (run,) = p.runs(reports)
    expect(not (run.parent / "stage").exists(), "a stage/ folder was left in the run directory")
    return f"exit 0 in {done.seconds:.0f} s; repository unchanged"


def model_slash(p: Probe) -> str:
    """`--model toy/` as a shell completes it."""
    args = p.run_args()
    args[args.index("toy")] = "toy/"
    done = p.autotune(*args)
    expect(done.code == 0, f"exit {done.code}: {done.err[-300:]}")
    return f"exit 0 ({done.seconds:.0f} s)"


def no_version(p: Probe) -> str:
    """A model folder without a version folder: refused up front in Triton's words."""
    repo = p.root / "flat"
    (repo / "toy").mkdir(parents=True)
    shutil.copy(TOY / "config.pbtxt", repo / "toy" / "config.pbtxt")
    shutil.copy(TOY / "1" / "model.py", repo / "toy" / "model.py")
    done = p.autotune(*p.run_args(repo=repo))
    expect(
        done.code == 2 and "No model version was found" in done.line(), f"exit {done.code}: {done.err[-300:]}"
    )
    expect(not p.runs(), "a run directory was written")
    return f"exit 2 in {done.seconds:.1f} s: {done.line()[:110]}"


def readonly_apply(p: Probe) -> str:
    """`apply` on a read-only repository: exit 6 naming the folder, nothing changed."""
    run_dir = p.finished_run()
    config = p.repo / "toy" / "config.pbtxt"
    before = config.read_bytes()
    with mounted(p.repo / "toy", "ro", kind="bind", source=str(p.repo / "toy")):
        done = p.autotune("apply", str(run_dir))
    expect(done.code == 6 and str(p.repo / "toy") in done.line(), f"exit {done.code}: {done.err[-300:]}")
    expect(config.read_bytes() == before, "the config changed")
    return f"exit 6: {done.line()[:120]}"


def second_undo(p: Probe) -> str:
    """`apply --undo` twice: the second says the original is there already, exit 0."""
    run_dir = p.finished_run()
    applied = p.autotune("apply", str(run_dir), "--no-verify")
    first, second = p.autotune("apply", str(run_dir), "--undo"), p.autotune("apply", str(run_dir), "--undo")
    expect(applied.code == first.code == second.code == 0, f"exits {applied.code} {first.code} {second.code}")
    expect("already holds the original" in second.out, f"said: {second.out} {second.err}")
    return second.out.strip()[:100]


def full_disk(p: Probe) -> str:
    """A disk without room for a run: refused before anything is written, naming the space."""
    with mounted(p.root / "small", "size=4m") as small:
        done = p.autotune(*p.run_args(reports=small))
        left = list(small.iterdir())
    expect(
        done.code == 2 and "MiB free" in done.line() and "needs about" in done.line(), f"{done.err[-300:]}"
    )
    expect(not left, f"written: {left}")
    return f"exit 2: {done.line()[:120]}"


def disk_fills(p: Probe) -> str:
    """The disk fills up during a run: exit 5 naming the file and the space, the report and the
    study kept; with room again, --resume finishes it."""
    with mounted(p.root / "disk", "size=40m") as disk:
        proc = p.start(*p.run_args("--max-trials", "3", "--patience", "0", reports=disk))
        wait_for(lambda: list(disk.glob("toy/*/logs/trial-000.log")), 300, "the first trial")
        filler = disk / "filler"
        _fill(filler)
        done = finish(proc)
        run_dir = p.runs(disk)[-1].parent
        report = (run_dir / "report.html").is_file()
        filler.unlink()
        again = p.autotune("run", "--resume", str(run_dir))
    expect(done.code == 5 and "no space left" in done.line(), f"exit {done.code}: {done.err[-400:]}")
    expect(report, "no report.html")
    expect(again.code == 0, f"the resume failed (exit {again.code}): {again.err[-300:]}")
    return f"exit 5 ({done.line()[:90]}...), report kept; resumed: exit 0"


def huge_shape(p: Probe) -> str:
    """A --shape too large to allocate is bad input, exit 2."""
    config = p.repo / "toy" / "config.pbtxt"
    config.write_text(
        config.read_text(encoding="utf-8").replace("dims: [ 16 ]", "dims: [ -1 ]"), encoding="utf-8"
    )
    done = p.autotune(*p.run_args("--shape", "x:100000000000"))
    expect(done.code == 2 and "GiB" in done.line(), f"exit {done.code}: {done.err[-300:]}")
    return f"exit 2: {done.line()[:120]}"


def margin(p: Probe) -> str:
    """--margin 1.5 is refused as the margin it is."""
    done = p.autotune(*p.run_args("--margin", "1.5"))
    expect(done.code == 2 and "--margin" in done.line(), f"exit {done.code}: {done.line()}")
    return done.line()[:100]


def batch_below(p: Probe) -> str:
    """A space whose max batch sizes are all below --batch-size says so."""
    p.space.write_text(SPACE.replace("max_batch_size: [8]", "max_batch_size: [2, 4]"), encoding="utf-8")
    done = p.autotune(*p.run_args("--batch-size", "8"))
    note = next((x for x in done.err.splitlines() if x.startswith("note:")), "")
    expect(done.code == 0 and "--batch-size 8" in note, f"exit {done.code}: {done.err[-300:]}")
    return note[:110]


# ---------------------------------------------------------------- the tester's second round


def open_files(p: Probe) -> str:
    """``ulimit -n 128`` (soft and hard) and a space of 64 clients: the run ends, exit 3,
    naming the limit, within a minute, and no trial is counted failed for it; with only the
    soft limit at 128, the run raises it and finishes. The first point is at 64 clients, so the
    limit is met however early the search would have stopped climbing."""
    p.space.write_text(SPACE.replace("{min: 1, max: 16}", "{min: 64, max: 64}"), encoding="utf-8")
    hard = p.autotune(*p.run_args(), limit_files=(128, 128), timeout=120)
    line = hard.line()
    expect(
        hard.code == 3 and "open-file limit" in line and "128" in line, f"exit {hard.code}: {hard.err[-400:]}"
    )
    expect(hard.seconds < 60, f"took {hard.seconds:.0f} s")
    trials = _trials(p.runs()[-1].parent)
    expect(
        not [t for t in trials if t["state"] == "FAIL" and not t["interrupted"]], f"counted failed: {trials}"
    )
    lax = ("--sla-p95-ms", "5000")  # 64 clients meet it
    soft = p.autotune(*p.run_args("--fresh", *lax), limit_files=(128, -1))
    expect(soft.code == 0, f"soft limit only: exit {soft.code}: {soft.err[-300:]}")
    return f"exit 3 in {hard.seconds:.1f} s: {line[:90]}; soft limit alone: raised, exit 0"


def apply_in_place(p: Probe) -> str:
    """`apply` on a config.pbtxt with comments and a hand layout: the comments stay, and a diff
    against the original shows only the lines of the fields the winner changed."""
    config = p.repo / "toy" / "config.pbtxt"
    hand = "# the toy model, laid out by hand\n" + config.read_text(encoding="utf-8").replace(
        "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]",
        "instance_group [ { count: 1 kind: KIND_CPU } ]  # one to start with",
    )
    config.write_text(hand, encoding="utf-8")
    run_dir = p.finished_run("--max-trials", "3", "--patience", "0", "--finalists", "1", "--repeats", "1")
    done = p.autotune("apply", str(run_dir), "--no-verify")
    expect(done.code == 0, f"exit {done.code}: {done.err[-300:]}")
    after = config.read_text(encoding="utf-8")
    expect(
        "# the toy model, laid out by hand" in after and "# one to start with" in after,
        f"comments lost: {after}",
    )
    changed = [line for line in difflib.unified_diff(hand.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]  # fmt: skip
    fields = ("instance_group", "count", "max_batch_size", "dynamic_batching", "delay", "preferred", "}")
    only = all(any(f in line for f in fields) for line in changed)
    expect(bool(changed) and only, f"lines changed: {changed}")
    expect(all(line in done.out for line in changed), f"the printed diff is not the file's: {done.out}")
    return f"{len(changed)} lines changed, comments kept: {'; '.join(changed)[:100]}"


def logged(p: Probe) -> str:
    """The output written to a file (not a terminal), the run directory under a 245-character
    path: no cell cut, no table row wrapped, every printed command on one line."""
    reports = p.root / ("reports-" + "x" * 60) / ("y" * 60) / ("z" * 60)
    reports = Path(str(reports) + "w" * max(0, 245 - len(str(reports)) - 27))  # run dir: +27 chars
    done = p.autotune(*p.run_args("--finalists", "1", "--max-trials", "2", reports=reports))
    expect(done.code == 0, f"exit {done.code}: {done.err[-300:]}")
    (run_json,) = p.runs(reports)
    lines = (done.out + done.err).splitlines()
    expect(len(str(run_json.parent)) >= 245, f"the path is {len(str(run_json.parent))} characters")
    expect(f"apply it: autotune apply {run_json.parent}" in lines, "the apply command is not on one line")
    expect(not any("…" in line for line in lines), "a cell was cut")
    table = [line for line in lines if line.startswith(("|", "+-"))]
    expect(len(table) >= 5 and len({len(line) for line in table}) == 1, f"the table: {table}")
    return f"{len(table)} table lines of {len(table[0])} characters; the apply line whole"


def stopped_by(p: Probe, sig: signal.Signals) -> str:
    """A run stopped by ``sig`` in the middle of a trial: exit 130, the interrupted line and the
    resume command, no traceback, nothing of it left in /tmp or /dev/shm; resumed, the console
    says which trial is measured again."""
    before_env = set(Path("/tmp").glob("python_env_*"))
    proc = p.start(*p.run_args("--max-trials", "3", "--patience", "0"))
    wait_for(lambda: list(p.root.glob("reports/toy/*/logs/trial-001.log")), 300, "the second trial")
    time.sleep(1.0)
    os.kill(proc.pid, sig)
    done = finish(proc)
    expect(done.code == 130, f"exit {done.code}: {done.err[-300:]}")
    found = re.search(r"continue with: (.+)$", done.err, re.MULTILINE)
    expect(found is not None, f"no resume line: {done.err[-300:]}")
    expect("Traceback" not in done.err and "Exception ignored" not in done.err, f"said: {done.err[-600:]}")
    left = _left_behind(proc.pid) + [str(f) for f in set(Path("/tmp").glob("python_env_*")) - before_env]
    expect(not left, f"left: {left}")
    assert found is not None
    again = p.autotune(*shlex.split(found.group(1))[1:])
    expect(again.code == 0, f"the resume failed (exit {again.code}): {again.err[-300:]}")
    expect("config again, first (it was interrupted)" in again.err, f"not said: {again.err[-400:]}")
    return f"exit 130, `{found.group(1)[:50]}...`, nothing left; resumed"


def sighup(p: Probe) -> str:
    """Closing the terminal (SIGHUP) is a stop like SIGTERM (see stopped_by)."""
    return stopped_by(p, signal.SIGHUP)


def sigterm(p: Probe) -> str:
    """SIGTERM (``timeout``) in the middle of a run (see stopped_by)."""
    return stopped_by(p, signal.SIGTERM)


def budget_said(p: Probe) -> str:
    """The start line says the budget is the whole run's, the race and the open-loop check in it."""
    done = p.autotune(*p.run_args("--time-budget", "60s", "--finalists", "1"))
    line = next((x for x in done.err.splitlines() if x.startswith("run directory:")), "")
    expect(
        done.code == 0 and "budget 1:00 for the whole run" in line and "the race" in line,
        f"exit {done.code}: {line}",
    )
    return line.split("; ", 1)[-1][:110]


def sla_below(p: Probe) -> str:
    """An SLA below every latency (seconds meant as milliseconds): exit 7, no winner, saying how
    far the SLA lies from the lowest latency measured."""
    args = p.run_args("--max-trials", "2")
    args[args.index("--sla-p95-ms") + 1] = "0.05"
    done = p.autotune(*args)
    line = done.line()
    expect(
        done.code == 7 and "no config met the SLA" in line and "x the limit" in line,
        f"exit {done.code}: {line}",
    )
    return f"exit 7: {line[:110]}"


def headline(p: Probe) -> str:
    """The gain printed is the ratio of the figures the table shows for the winner and your config."""
    done = p.autotune(*p.run_args("--max-trials", "3", "--patience", "0", "--finalists", "2"))
    expect(done.code == 0, f"exit {done.code}: {done.err[-300:]}")
    rows = {cells[1]: cells for line in done.out.splitlines() if line.startswith("|")
            for cells in [[c.strip() for c in line.split("|")]]}  # fmt: skip
    found = re.search(r"winner vs your config: ([0-9.]+)x", done.out)
    expect(found is not None and "winner" in rows and "baseline" in rows, f"said: {done.out[-600:]}")
    assert found is not None
    column = rows[""].index("infer/s")
    ratio = float(rows["winner"][column]) / float(rows["baseline"][column])
    expect(
        abs(ratio - float(found.group(1))) <= 0.01 * ratio + 0.01, f"{found.group(1)}x against {ratio:.2f}"
    )
    return f"{found.group(0)}; the table: {rows['winner'][column]} / {rows['baseline'][column]}"


def server_pid(p: Probe) -> str:
    """kill -9 of a trial's tritonserver: the message names that server's pid, not its guard's."""
    proc = p.start(*p.run_args("--max-trials", "2", "--patience", "0"))
    pid = 0

    def serving() -> bool:
        nonlocal pid
        found = [x for x in servers() if "tritonserver" in _command(x) and "guard" not in _command(x)
                 and "/reports/" not in _command(x) and f".{proc.pid}." in _command(x)]  # fmt: skip
        pid = found[0] if found else 0
        return bool(pid)

    wait_for(serving, 120, "a trial's tritonserver")
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    done = finish(proc)
    expect(f"tritonserver (pid {pid})" in done.err, f"pid {pid} not named: {done.err[-400:]}")
    return f"killed {pid}; named: tritonserver (pid {pid})"


def missing_module(p: Probe) -> str:
    """A model whose model.py imports a module the server lacks: exit 3 within a minute, the
    module named."""
    model = p.repo / "toy" / "1" / "model.py"
    model.write_text("import autotune_no_such_module\n" + model.read_text(encoding="utf-8"), encoding="utf-8")
    done = p.autotune(*p.run_args("--max-trials", "5"))
    line = done.line()
    expect(done.code == 3 and "autotune_no_such_module" in line, f"exit {done.code}: {done.err[-400:]}")
    expect(done.seconds < 60, f"took {done.seconds:.0f} s")
    return f"exit 3 in {done.seconds:.1f} s: {line[:100]}"


def _command(pid: int) -> str:
    from autotune.processes import cmdline

    return cmdline(pid)


def _left_behind(pid: int) -> list[str]:
    """What a run of process ``pid`` left: its stage folder, its python backend shared memory."""
    from autotune.staging import stage_root

    stages = [str(f) for f in stage_root().glob(f"*.{pid}.*")] if stage_root().is_dir() else []
    return stages + [str(f) for f in Path("/dev/shm").glob(f"autotune_pb_{pid}_*")]


CASES: dict[str, Callable[[Probe], str]] = {
    "two-runs": two_runs,
    "two-runs-wait": two_runs_wait,
    "bench-during-run": bench_during_run,
    "killed-lock": killed_lock,
    "errors": errors,
    "resume-line": resume_line,
    "killed-resume": killed_resume,
    "storage": storage,
    "paths": paths,
    "model-slash": model_slash,
    "no-version": no_version,
    "readonly-apply": readonly_apply,
    "second-undo": second_undo,
    "full-disk": full_disk,
    "disk-fills": disk_fills,
    "huge-shape": huge_shape,
    "margin": margin,
    "batch-below": batch_below,
    "open-files": open_files,
    "apply-in-place": apply_in_place,
    "logged": logged,
    "sighup": sighup,
    "sigterm": sigterm,
    "budget-said": budget_said,
    "sla-below": sla_below,
    "headline": headline,
    "server-pid": server_pid,
    "missing-module": missing_module,
}


def _trials(run_dir: Path) -> list[dict[str, object]]:
    """The run's trials as plain records (number, state, params, interrupted), in the order
    they started (a trial queued early keeps its early number)."""
    import optuna

    from autotune.rundir import RunDir

    run = RunDir.load(run_dir)
    study = optuna.load_study(study_name=run.record.study_name, storage=run.study_url())
    started = [(t.datetime_start, t) for t in study.trials if t.datetime_start is not None]
    return [
        {
            "number": t.number,
            "state": t.state.name,
            "params": t.params,
            "interrupted": bool(t.user_attrs.get("interrupted")),
        }
        for _, t in sorted(started, key=lambda pair: pair[0])
    ]


def _fill(path: Path) -> None:
    """Write ``path`` until its disk is full, to the last page."""
    with path.open("wb", buffering=0) as handle:
        for size in (1 << 20, 1 << 12):
            try:
                while True:
                    handle.write(bytes(size))
            except OSError:
                pass


# ---------------------------------------------------------------- running them


@dataclass(frozen=True)
class Row:
    case: str
    verdict: str  # good, WRONG, skipped
    seconds: float
    detail: str


def run_case(name: str, root: Path) -> Row:
    start = time.monotonic()
    try:
        detail, verdict = CASES[name](Probe(root / name)), "good"
    except Wrong as exc:
        detail, verdict = str(exc), "WRONG"
    except Skipped as exc:
        detail, verdict = str(exc), "skipped"
    return Row(name, verdict, time.monotonic() - start, " ".join(detail.split()))


def servers() -> set[int]:
    """Pids of tritonserver processes and python backend stubs running now."""
    from autotune.processes import cmdline

    pids = (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return {pid for pid in pids if any(name in cmdline(pid) for name in ("tritonserver", "backend_stub"))}


def leftovers(root: Path, before: set[int]) -> list[str]:
    """What the probe left: servers of its runs (their stages name the runs' ids) that were not
    running before, and mounts under ``root``. Another program's servers are not the probe's."""
    from autotune.processes import cmdline

    time.sleep(1.0)  # a server stopped in the background finishes
    ids = {run.parent.name for run in root.rglob("run.json")}
    ours = [pid for pid in sorted(servers() - before) if any(f"/{i}." in cmdline(pid) for i in ids)]
    left = [f"server pid {pid}" for pid in ours if Path(f"/proc/{pid}").exists()]
    mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    left += [f"mount {m.split()[1]}" for m in mounts if m.split()[1].startswith(str(root))]
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="cases to run (default: all)")
    parser.add_argument("--list", action="store_true", help="name the cases and what each checks")
    parser.add_argument("--keep", type=Path, help="work in this folder and leave it")
    args = parser.parse_args(argv)
    if args.list:
        for name, case in CASES.items():
            print(f"{name:18} {' '.join((case.__doc__ or '').split())}")
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)} (see --list)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="careless-day-"))
    before = servers()
    rows = []
    for name in args.cases or CASES:
        rows.append(run_case(name, root))
        row = rows[-1]
        print(f"{row.case:18} {row.verdict:8} {row.seconds:6.1f} s  {row.detail}", flush=True)
    left = leftovers(root, before)
    print(f"left running or mounted: {', '.join(left) or 'nothing'}")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    wrong = [r.case for r in rows if r.verdict == "WRONG"]
    print(
        f"{len(rows) - len(wrong)} of {len(rows)} cases good"
        + (f"; wrong: {', '.join(wrong)}" if wrong else "")
    )
    return 1 if wrong or left else 0


if __name__ == "__main__":
    sys.exit(main())
