"""The pure parts of the pull requests' evidence scripts: benchmarks/upstream_evidence.py,
benchmarks/upstream_benchmark_app.py and the OpenVINO reproducer upstream/openvino_f16_zero_point.py (whose text
upstream/openvino-issue.md carries)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import openvino as ov
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import each other as scripts


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"evidence_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


evidence = load(ROOT / "benchmarks" / "upstream_evidence.py")
bapp = load(ROOT / "benchmarks" / "upstream_benchmark_app.py")
reproducer = load(ROOT / "upstream" / "openvino_f16_zero_point.py")


def make_tree(root: Path) -> Path:
    (root / "src" / "nncf").mkdir(parents=True)
    (root / "src" / "nncf" / "__init__.py").write_text("")
    return root


def test_parse_trees_reads_names_and_dirs(tmp_path: Path) -> None:
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    assert evidence.parse_trees(f"core={a}, pr3981={b},") == {"core": a, "pr3981": b}


@pytest.mark.parametrize(
    ("text", "message"),
    [("core", "is not NAME=DIR"), ("=x", "is not NAME=DIR"), ("rtn={tree}", "taken"), ("c={tree},c={tree}", "taken")],
    ids=["no_dir", "no_name", "rtn_reserved", "duplicate"],
)
def test_parse_trees_refuses(tmp_path: Path, text: str, message: str) -> None:
    tree = make_tree(tmp_path / "t")
    with pytest.raises(ValueError, match=message):
        evidence.parse_trees(text.format(tree=tree))


def test_parse_trees_refuses_a_dir_without_nncf(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no src/nncf"):
        evidence.parse_trees(f"core={tmp_path}")


def test_child_turns_hqq_on_exactly_for_a_tree(tmp_path: Path) -> None:
    rtn = evidence.child_command(Path("m.xml"), "-", 64, evidence.Row(None), False)
    tree = evidence.child_command(Path("m.xml"), "-", 64, evidence.Row(tmp_path), True)
    assert "--hqq" not in rtn and "--tree" not in rtn and "--all-layers" not in rtn
    assert tree[tree.index("--tree") + 1] == str(tmp_path.resolve())
    assert "--hqq" in tree and "--all-layers" in tree and "--hqq-param" not in tree


def test_ablation_rows_pass_their_parameter_to_the_child(tmp_path: Path) -> None:
    rows = evidence.parse_ablations("core:num_iterations=0, core:rtn_value_projections=False", {"core": tmp_path})
    assert list(rows) == ["core num_iterations=0", "core rtn_value_projections=False"]
    child = evidence.child_command(Path("m.xml"), "-", 64, rows["core num_iterations=0"], False)
    assert child[child.index("--hqq-param") + 1] == "num_iterations=0"
    assert evidence.parse_param("rtn_value_projections=False") == ("rtn_value_projections", False)


@pytest.mark.parametrize(
    ("text", "message"),
    [("pr:num_iterations=0", "TREE in --trees"), ("core", "TREE:FIELD=VALUE"), ("core:=1", "FIELD=VALUE")],
    ids=["unknown-tree", "no-parameter", "no-field"],
)
def test_parse_ablations_refuses(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evidence.parse_ablations(text, {"core": tmp_path})


def test_timed_rows_are_trees_or_trees_with_one_parameter_changed(tmp_path: Path) -> None:
    trees = {"core": tmp_path / "core", "pr": tmp_path / "pr"}
    rows = evidence.parse_timed("core, core:num_iterations=0", trees)
    assert rows == {
        "core": evidence.Row(trees["core"]),
        "core num_iterations=0": evidence.Row(trees["core"], ("num_iterations=0",)),
    }
    assert evidence.parse_timed("", trees) == {name: evidence.Row(tree) for name, tree in trees.items()}
    with pytest.raises(ValueError, match="neither a tree"):
        evidence.parse_timed("old", trees)


def test_rows_set_mode_hqq_parameters_and_self_calibration(tmp_path: Path) -> None:
    rows = evidence.parse_rows(
        "rtn:mode=INT4_SYM, t:hqq.integer_zero_point=True+mode=INT4_SYM,"
        "rtn:awq=True+scale_estimation=True+dataset=self",
        {"t": tmp_path},
    )
    assert list(rows) == [
        "rtn mode=INT4_SYM",
        "t hqq.integer_zero_point=True+mode=INT4_SYM",
        "rtn awq=True+scale_estimation=True+dataset=self",
    ]
    assert rows["rtn mode=INT4_SYM"] == evidence.Row(None, (), ("mode=INT4_SYM",))
    assert rows["t hqq.integer_zero_point=True+mode=INT4_SYM"] == evidence.Row(
        tmp_path, ("integer_zero_point=True",), ("mode=INT4_SYM",)
    )
    child = evidence.child_command(Path("m.xml"), "-", 64, rows["t hqq.integer_zero_point=True+mode=INT4_SYM"], False)
    assert child[child.index("--hqq-param") + 1] == "integer_zero_point=True"
    assert child[child.index("--option") + 1] == "mode=INT4_SYM" and "--dataset" not in child
    calibrated = rows["rtn awq=True+scale_estimation=True+dataset=self"]
    assert calibrated.calibrated and not rows["rtn mode=INT4_SYM"].calibrated
    child = evidence.child_command(Path("m.xml"), "-", 64, calibrated, False, dataset=Path("self.npy"))
    assert [child[i + 1] for i, arg in enumerate(child) if arg == "--option"] == ["awq=True", "scale_estimation=True"]
    assert child[child.index("--dataset") + 1] == "self.npy" and "--hqq" not in child
    with pytest.raises(ValueError, match="needs the calibration tokens"):
        evidence.child_command(Path("m.xml"), "-", 64, calibrated, False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pr:mode=INT4_SYM", "SOURCE rtn or a tree"),
        ("t", "SOURCE:SETTING"),
        ("t:", "SOURCE:SETTING"),
        ("rtn:hqq.num_iterations=0", "no HQQ parameters"),
        ("rtn:dataset=wikitext", "only dataset is 'self'"),
        ("t:group_size=128", "fixed by the protocol"),
        ("rtn:mode=INT4_SYM,rtn:mode=INT4_SYM", "given twice"),
        ("t:mode", "FIELD=VALUE"),
    ],
    ids=["unknown-source", "no-settings", "empty-settings", "hqq-on-rtn", "other-dataset", "reserved", "twice", "bare"],
)
def test_parse_rows_refuses(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evidence.parse_rows(text, {"t": tmp_path})


def test_parse_param_keeps_bare_names_only_when_asked() -> None:
    assert evidence.parse_param("mode=INT4_SYM", strings=True) == ("mode", "INT4_SYM")
    assert evidence.parse_param("awq=True", strings=True) == ("awq", True)
    with pytest.raises(ValueError, match="malformed"):
        evidence.parse_param("mode=INT4_SYM")


def test_prefill_inputs_match_nncf_hqq_self_calibration() -> None:
    from nncf_hqq.self_calibration import calibration_inputs

    tokens = np.arange(12, dtype=np.int64).reshape(3, 4)
    names = ("input_ids", "attention_mask", "position_ids", "beam_idx")
    ours, oracle = evidence.prefill_inputs(tokens, set(names)), calibration_inputs(tokens, names)
    assert len(ours) == len(oracle) == 3
    for a, b in zip(ours, oracle, strict=True):
        assert a.keys() == b.keys()
        for name in names:
            np.testing.assert_array_equal(a[name], b[name])
            assert a[name].dtype == b[name].dtype
    assert list(evidence.prefill_inputs(tokens, {"input_ids"})[0]) == ["input_ids"]


def test_gap_closed() -> None:
    assert evidence.gap_closed(38.0, 34.0, 28.0) == pytest.approx(0.4)
    assert evidence.gap_closed(0.96, 0.98, 1.0) == pytest.approx(0.5)
    assert evidence.gap_closed(38.0, 38.0, 28.0) == 0.0


def test_child_forbids_nncf_hqq() -> None:
    with pytest.raises(ImportError, match="must not be imported"):
        evidence._ForbidNNCFHQQ().find_spec("nncf_hqq.maths", None)
    assert evidence._ForbidNNCFHQQ().find_spec("nncf", None) is None


@pytest.mark.parametrize(
    ("line", "ms"), [("Median:  75.39 us", 0.07539), ("Median: 12.5 ms", 12.5), ("Median: 1.5 s", 1500)]
)
def test_median_latency_in_ms(line: str, ms: float) -> None:
    assert bapp.median_ms(f"[ INFO ] Latency:\n[ INFO ]    {line}\n[ INFO ]    Average: 9 ms") == pytest.approx(ms)


def test_median_latency_missing() -> None:
    with pytest.raises(ValueError, match="no median latency"):
        bapp.median_ms("[ ERROR ] nothing ran")


def test_plugin_settings() -> None:
    output = "[ INFO ]   INFERENCE_PRECISION_HINT: <Type: 'float32'>\n[ INFO ]   DYNAMIC_QUANTIZATION_GROUP_SIZE: 32\n"
    assert bapp.plugin_settings(output) == {
        "INFERENCE_PRECISION_HINT": "<Type: 'float32'>",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": "32",
    }


def test_per_round_ratio_pairs_rounds() -> None:
    # per-round ratios 2, 1, 3: median 2; the ratio of the medians would be 3 / 1 = 3
    assert bapp.per_round_ratio([1.0, 4.0, 1.0], [2.0, 4.0, 3.0]) == pytest.approx(2.0)


def test_issue_carries_the_reproducer_verbatim() -> None:
    issue = (ROOT / "upstream" / "openvino-issue.md").read_text()
    script = (ROOT / "upstream" / "openvino_f16_zero_point.py").read_text()
    assert f"```python\n{script.rstrip()}\n```" in issue


@pytest.mark.parametrize(("zero_point", "stored"), [("u4", "u4"), ("f16", "f16")])
def test_reproducer_models_differ_only_in_the_zero_point(zero_point: str, stored: str) -> None:
    model = reproducer.matmul(256, 64, 128, zero_point)
    subtract = next(op for op in model.get_ops() if op.get_type_name() == "Subtract")
    codes, zp = (subtract.input_value(i).get_node() for i in (0, 1))
    assert codes.input_value(0).get_node().get_element_type() == ov.Type.u4
    zp_constant = zp.input_value(0).get_node() if zp.get_type_name() == "Convert" else zp
    assert zp_constant.get_element_type().get_type_name() == stored
    assert list(zp_constant.get_output_shape(0)) == [64, 2, 1]
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    y = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0]
    assert y.shape == (2, 64) and np.isfinite(y).all()


def test_markdown_report_of_a_saved_run() -> None:
    record = {
        "repeats": 3,
        "parts": {
            "minilm": {
                "group_size": 64,
                "lines": 200,
                "metrics": {
                    "rtn": {"cosine": 0.96, "cosine_min": 0.94, "cosine_gap_closed": 0.0},
                    "core": {"cosine": 0.97, "cosine_min": 0.95, "cosine_gap_closed": 0.25},
                },
                "compress_seconds": {"rtn": 7.6, "core": 12.1},
            },
            "time": {
                "smollm2": {"median_seconds": {"rtn": 8.0, "core": 12.0}, "ratio_to_rtn": {"rtn": 1.0, "core": 1.5}}
            },
        },
    }
    text = evidence.markdown(record)
    assert "| core | 0.97000 | 0.95000 | 25% | 12.1 |" in text
    assert "| smollm2 | 8.0 (1.00x) | 12.0 (1.50x) |" in text


sequential = load(ROOT / "benchmarks" / "_sequential.py")


def window_sums_of(nll: list[float], kl: list[float], top1: list[float]) -> dict[str, list[float]]:
    """Windows of 11 positions (10 predicted tokens) each."""
    return {"nll": nll, "predicted": [10.0] * len(nll), "kl": kl, "top1": top1, "positions": [11.0] * len(nll)}


def test_metrics_of_window_sums_are_the_pooled_ratios() -> None:
    metrics = sequential.metrics_of_sums(window_sums_of([10.0, 30.0], [1.1, 3.3], [11.0, 0.0]))
    assert metrics["ppl"] == pytest.approx(np.exp(2.0))
    assert metrics["kl"] == pytest.approx(0.2)
    assert metrics["top1"] == pytest.approx(0.5)


def test_paired_interval_of_a_row_with_itself_is_zero() -> None:
    row = window_sums_of([12.0, 25.0, 19.0, 31.0], [1.0, 2.0, 0.5, 3.0], [8.0, 6.0, 9.0, 4.0])
    for point, low, high in sequential.paired_interval(row, row).values():
        assert point == low == high == 0.0


def test_paired_interval_of_a_shift_in_every_window_is_the_shift() -> None:
    """The same KL added to every window moves every resample's KL by the same amount: a point interval."""
    base = window_sums_of([12.0, 25.0, 19.0, 31.0], [1.0, 2.0, 0.5, 3.0], [8.0, 6.0, 9.0, 4.0])
    shifted = {**base, "kl": [value + 1.1 for value in base["kl"]]}
    point, low, high = sequential.paired_interval(shifted, base)["kl"]
    assert point == pytest.approx(0.1) and low == pytest.approx(0.1) and high == pytest.approx(0.1)


def test_paired_mean_interval_holds_the_mean_difference_and_is_paired() -> None:
    base = list(np.random.default_rng(0).normal(size=200))
    assert sequential.paired_mean_interval([b + 0.5 for b in base], base) == pytest.approx((0.5, 0.5, 0.5))
    noisy = [b + 0.5 + n for b, n in zip(base, np.random.default_rng(1).normal(scale=0.1, size=200), strict=True)]
    point, low, high = sequential.paired_mean_interval(noisy, base)
    assert low < point < high and low > 0.45 and high < 0.55


def test_rows_are_compared_with_rtn_and_ablations_with_their_tree() -> None:
    rows = dict.fromkeys(["float", "rtn", "core", "core num_iterations=0", "other num_iterations=0"])
    assert evidence.compared_pairs(rows) == [
        ("float", "rtn"),
        ("core", "rtn"),
        ("core num_iterations=0", "rtn"),
        ("core num_iterations=0", "core"),
        ("other num_iterations=0", "rtn"),
    ]
