"""What reading a large ``--input-data`` file costs: json.loads against ijson, and our reader.

    .venv/bin/python benchmarks/experiments/input_read_memory.py               # ~100 MB (~1 min)
    .venv/bin/python benchmarks/experiments/input_read_memory.py --megabytes 20

Writes bertQA_dynamic entries (benchmarks/workload_memory.py's ``write_input``) and reads the
file in a fresh process per way, printing each one's peak resident memory (ru_maxrss) and time:

json.loads   the whole document as Python objects (the reader before ijson)
ijson        ijson.items over ``data.item``, each entry dropped (the parser's own cost)
read         autotune's read_workload against bertQA_dynamic's config.pbtxt (arrays kept)
read+encode  then the requests encoded once for HTTP (what a tuning run holds)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from workload_memory import write_input  # noqa: E402

WAYS = ("json.loads", "ijson", "read", "read+encode")
CHILD = """
import json, resource, sys, time
from pathlib import Path
way, path, config = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
start, extra = time.monotonic(), ""
if way == "json.loads":
    count = len(json.loads(path.read_text(encoding="utf-8"))["data"])
elif way == "ijson":
    import ijson
    with path.open("rb") as stream:
        count = sum(1 for _ in ijson.items(stream, "data.item", use_float=True))
else:
    from autotune.loadgen._inputs import ModelIO, read_workload
    from autotune.model_config import parse_config
    from autotune.settings import Workload
    io = ModelIO.from_config("bertQA_dynamic", parse_config(config.read_text(encoding="utf-8")))
    data = read_workload(io, Workload(str(path)))
    count = len(data.entries)
    if way == "read+encode":
        extra = f", {sum(map(len, data.encoded('http', '127.0.0.1'))) / 1e6:.0f} MB encoded"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{way:<12} {count} entries  peak {peak:5.0f} MB  {time.monotonic() - start:4.1f} s{extra}", flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=100.0)
    args = parser.parse_args()
    config = ROOT / "examples" / "model_repository" / "bertQA_dynamic" / "config.pbtxt"
    with tempfile.TemporaryDirectory(prefix="input-read-") as work:
        path = Path(work) / "input.json"
        count = write_input(path, args.megabytes)
        print(f"{path.stat().st_size / 1e6:.1f} MB, {count} entries", flush=True)
        for way in WAYS:
            subprocess.run([sys.executable, "-c", CHILD, way, str(path), str(config)], check=True, cwd=ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
