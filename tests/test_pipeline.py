"""autotune.pipeline: an ensemble's or a BLS model's composing models, read and checked from the
repository before any server starts (pure logic: config files on disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.pipeline import BLS, ENSEMBLE, read_pipeline


def _model(repo: Path, name: str, text: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')


def _tensor(kind: str, name: str, dtype: str = "TYPE_FP32") -> str:
    return f'{kind} [{{ name: "{name}" data_type: {dtype} dims: [ -1 ] }}]\n'


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'step [{{ model_name: "{model}" model_version: -1 {ins} {outs} }}]'


def _pipeline_repo(tmp_path: Path, steps: list[str], ensemble_mbs: int = 8) -> Path:
    """pre (TEXT: BYTES -> IDS: INT64), encoder (IDS -> LOGITS: FP32), post (LOGITS -> ANSWER:
    BYTES), smooth (X: FP32 -> Y: FP32), and an ensemble "qa" of ``steps``."""
    repo = tmp_path / "repo"
    py = 'backend: "python"\nmax_batch_size: 16\n'
    _model(repo, "pre", py + _tensor("input", "TEXT", "TYPE_STRING") + _tensor("output", "IDS", "TYPE_INT64"))
    _model(repo, "encoder", py + _tensor("input", "IDS", "TYPE_INT64") + _tensor("output", "LOGITS"))
    _model(repo, "post", py + _tensor("input", "LOGITS") + _tensor("output", "ANSWER", "TYPE_STRING"))
    _model(repo, "smooth", py + _tensor("input", "X") + _tensor("output", "Y"))
    ensemble = (
        f'platform: "ensemble"\nmax_batch_size: {ensemble_mbs}\n'
        + _tensor("input", "QUESTION", "TYPE_STRING")
        + _tensor("output", "ANSWER", "TYPE_STRING")
        + "ensemble_scheduling {\n"
        + "\n".join(steps)
        + "\n}\n"
    )
    _model(repo, "qa", ensemble)
    return repo


GOOD = [
    _step("post", {"LOGITS": "logits"}, {"ANSWER": "ANSWER"}),  # listed out of order: data decides
    _step("pre", {"TEXT": "QUESTION"}, {"IDS": "ids"}),
    _step("encoder", {"IDS": "ids"}, {"LOGITS": "logits"}),
]


def test_an_ensembles_members_come_in_the_order_data_flows_through_them(tmp_path: Path) -> None:
    repo = _pipeline_repo(tmp_path, GOOD)
    found = read_pipeline(repo, "qa")
    assert found is not None and found.kind == ENSEMBLE
    assert found.members == ("pre", "encoder", "post")
    assert read_pipeline(repo, "encoder") is None  # a model that serves alone
    bls = read_pipeline(repo, "encoder", ["pre", "post", "pre"])
    assert bls is not None and bls.kind == BLS and bls.members == ("pre", "post")


@pytest.mark.parametrize(
    ("steps", "ensemble_mbs", "message"),
    [
        ([*GOOD[:2], _step("missing", {"IDS": "ids"}, {"LOGITS": "logits"})], 8,
         r"qa: step 3 names 'missing', which is not in .*repo"),
        ([GOOD[0], GOOD[1], _step("encoder", {"IDS": "ids"}, {"SCORES": "logits"})], 8,
         r"step 3 \(encoder\) maps output 'SCORES', which encoder does not have"),
        ([GOOD[0], _step("pre", {"TEXT": "QUESTION"}, {"IDS": "ids"}),
          _step("encoder", {"IDS": "QUESTION"}, {"LOGITS": "logits"})], 8,
         r"step 3 \(encoder\) takes 'IDS' as TYPE_INT64, but 'QUESTION' from the ensemble's input is "
         r"TYPE_STRING"),
        ([_step("post", {"LOGITS": "logits"}, {"ANSWER": "ANSWER"}),
          _step("encoder", {"IDS": "ids"}, {"LOGITS": "logits"})], 8,
         r"step 2 \(encoder\) consumes 'ids', which no ensemble input or step produces"),
        ([*GOOD, _step("smooth", {"X": "a"}, {"Y": "b"}), _step("smooth", {"X": "b"}, {"Y": "a"})], 8,
         r"qa: its steps form a cycle \(smooth, smooth each wait"),
        ([*GOOD[:2], _step("qa", {"QUESTION": "ids"}, {"ANSWER": "logits"})], 8,
         r"names the ensemble itself"),
        (GOOD, 32, r"max_batch_size 32, but its step pre has 16"),
    ],
)  # fmt: skip
def test_a_broken_ensemble_is_one_line_before_any_server(
    tmp_path: Path, steps: list[str], ensemble_mbs: int, message: str
) -> None:
    repo = _pipeline_repo(tmp_path, steps, ensemble_mbs)
    with pytest.raises(ConfigError, match=message) as caught:
        read_pipeline(repo, "qa")
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


def test_composing_models_must_be_in_the_repository(tmp_path: Path) -> None:
    repo = _pipeline_repo(tmp_path, GOOD)
    with pytest.raises(ConfigError, match=r"encoder: --composing-models names 'tokenizer', which is not in"):
        read_pipeline(repo, "encoder", ["pre", "tokenizer"])
    with pytest.raises(ConfigError, match="is an ensemble"):
        read_pipeline(repo, "qa", ["pre"])
    with pytest.raises(ConfigError, match="names 'encoder' itself"):
        read_pipeline(repo, "encoder", ["encoder"])


def test_run_on_an_ensemble_says_in_one_line_what_it_is_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tuning a pipeline end to end is not built yet: the run says so (and a broken ensemble
    says what is broken), exit code 2, before any server, nothing written."""
    from autotune.cli import main

    repo = _pipeline_repo(tmp_path, GOOD)
    argv = ["run", "--model", "qa", "--model-repository", str(repo), "--sla-p95-ms", "50",
            "--reports-dir", str(tmp_path / "reports")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "model 'qa' is an ensemble (pre -> encoder -> post)" in err and len(err.strip().splitlines()) == 1
    broken = _pipeline_repo(
        tmp_path / "broken", [*GOOD[:2], _step("missing", {"IDS": "ids"}, {"LOGITS": "logits"})]
    )
    assert main([*argv[:4], str(broken), *argv[5:]]) == 2
    err = capsys.readouterr().err
    assert "step 3 names 'missing', which is not in" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "reports").exists()
