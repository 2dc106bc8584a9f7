"""A fresh server's warm-up (autotune/warmup.py): every instance at the batch sizes of the doubling
ladder to the largest the config can form, on the workload's first entry (pure logic)."""

from __future__ import annotations

import struct

import numpy as np

from autotune import warmup
from autotune.model_config import apply_candidate, parse_config
from autotune.search_space import Candidate

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_the_batch_sizes_climb_the_doubling_ladder_to_the_largest_the_config_can_form() -> None:
    config = parse_config(CONFIG)
    assert warmup.batch_sizes(config, 1) == [1]  # no dynamic batching: the client's batch alone
    batching = apply_candidate(config, Candidate(2, "KIND_CPU", (), 8, True, (), 0, False))
    assert warmup.batch_sizes(batching, 1) == [1, 2, 4, 8]  # the doubling ladder to the largest
    assert warmup.batch_sizes(batching, 4) == [4, 8]  # whole client batches only
    assert warmup.batch_sizes(batching, 3) == [3, 6]  # the largest whole one: 6 of 8
    batching.max_batch_size = 12
    assert warmup.batch_sizes(batching, 1) == [1, 2, 4, 8, 12]
    config.max_batch_size = 0
    assert warmup.batch_sizes(config, 1) == [1]  # a model that does not batch


def test_a_sample_per_batch_size_reads_the_workloads_first_entry() -> None:
    config = apply_candidate(parse_config(CONFIG), Candidate(2, "KIND_CPU", (), 4, True, (), 0, False))
    entry = (np.arange(4, dtype=np.float32), np.array([b"hello"], dtype=object))
    warmed, files = warmup.samples(config, entry, ["x", "text"], 2)
    assert [(s.name, s.batch_size) for s in warmed.model_warmup] == [
        ("autotune batch 2", 2),
        ("autotune batch 4", 4),
    ]
    x = warmed.model_warmup[0].inputs["x"]
    assert list(x.dims) == [4] and x.input_data_file == "autotune-x"
    assert files["autotune-x"] == np.arange(4, dtype=np.float32).tobytes()
    assert files["autotune-text"] == struct.pack("<I", 5) + b"hello"  # Triton's string layout
    assert not config.model_warmup  # the config given is not changed


def test_your_own_warm_up_is_kept_and_an_input_left_out_is_left_out() -> None:
    yours = parse_config(CONFIG + 'model_warmup [ { name: "mine" batch_size: 1 inputs { key: "x" value { '
                         'data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]')  # fmt: skip
    kept, files = warmup.samples(yours, (np.zeros(4, np.float32), None), ["x", "text"], 1)
    assert kept == yours and files == {}
    plain, files = warmup.samples(parse_config(CONFIG), (np.zeros(4, np.float32), None), ["x", "text"], 1)
    assert list(plain.model_warmup[0].inputs) == ["x"] and list(files) == ["autotune-x"]


def test_a_sample_refused_at_the_clients_batch_is_the_datas_fault_a_larger_one_the_configs() -> None:
    line = (
        "E1204 23:54:43.1 model_lifecycle.cc:654] \"failed to load 'm' version 1: Invalid argument: "
        "failed to run warmup sample 'autotune batch 2': INPUT_IMAGE is not a base64-encoded image;\\n"
        'Traceback ..."'
    )
    assert warmup.refused(line, 2) == "INPUT_IMAGE is not a base64-encoded image"
    assert warmup.refused(line, 1) is None  # batch 2 failed where the client sends 1: the config's
    assert warmup.refused(line.replace("autotune batch", "yours"), 2) is None  # your own warm-up
    assert warmup.refused("I1204 model 'm' loaded", 1) is None
