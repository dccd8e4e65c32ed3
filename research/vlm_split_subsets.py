"""Time per output token of a VLM's split zero points kept on a subset of its projections (timing only).

From the dirs ``benchmarks/named_models.py`` wrote for a vision-language model (``optimum``: optimum-cli's int4,
``data-free``: ``nncf-hqq compress --no-self-calibration`` with split zero points), this writes variants of the
data-free dir whose language model keeps the split's output correction only on some projections; on the others the
correction is dropped, leaving the rounded integer zero point (the timing of an integer-zero-point layer, NOT its
accuracy: HQQ's integer zero points are optimised as such, these are not). Then every dir is timed by
``openvino_genai.VLMPipeline`` in interleaved rounds (``named_models.measure_latency``), and the medians of the
per-round ratios to optimum-cli's are printed and written as JSON. With ``--decode``, the language models' decode
steps are timed instead (``benchmarks/inference.py --irs``: single steps of every IR in turn, a new random order for
each step, in fresh processes that compile the IRs in random orders), which a GenAI round's spread does not blur.

    python research/vlm_split_subsets.py --rounds 5      # Qwen2.5-VL-3B's dirs under ~/.cache/nncf_hqq/checkpoints
    python research/vlm_split_subsets.py --decode --rounds 12 --out results/vlm_split_decode.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Callable
from pathlib import Path

import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import inference  # noqa: E402
import named_models  # noqa: E402

from nncf_hqq.openvino.split import CORRECTION_SUFFIX  # noqa: E402

LANGUAGE_MODEL = "openvino_language_model"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: Variant name -> the projections that keep their correction.
VARIANTS: dict[str, Callable[[str], bool]] = {
    "mlp-split": lambda kind: kind in ("gate_proj", "up_proj", "down_proj"),
    "no-qk-split": lambda kind: kind not in ("q_proj", "k_proj"),
    "no-split": lambda kind: False,
}


def projection(name: str) -> str:
    return next((kind for kind in PROJECTIONS if kind in name), "other")


def write_variant(source: Path, out: Path, keep: Callable[[str], bool]) -> dict[str, dict[str, int]]:
    """``source`` with the corrections of the projections ``keep`` refuses dropped; the other files linked."""
    out.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if not path.name.startswith(LANGUAGE_MODEL) and not (out / path.name).exists():
            (out / path.name).symlink_to(path.resolve())
    model = ov.Core().read_model(source / f"{LANGUAGE_MODEL}.xml")
    counts: dict[str, collections.Counter[str]] = {"kept": collections.Counter(), "dropped": collections.Counter()}
    for op in model.get_ops():
        if op.get_type_name() != "Add" or not op.get_friendly_name().endswith(f"/{CORRECTION_SUFFIX}"):
            continue
        kind = projection(op.get_friendly_name())
        if keep(kind):
            counts["kept"][kind] += 1
            continue
        for target in list(op.output(0).get_target_inputs()):
            target.replace_source_output(op.input_value(0))
        counts["dropped"][kind] += 1
    model.validate_nodes_and_infer_types()
    ov.save_model(model, out / f"{LANGUAGE_MODEL}.xml", compress_to_fp16=False)
    return {key: dict(value) for key, value in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path.home() / ".cache" / "nncf_hqq" / "checkpoints" / "out" / "qwen2.5-vl-3b-instruct"
    parser.add_argument("--dirs", type=Path, default=default, help="holding optimum/ and data-free/")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vlm_split_subsets"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("results/vlm_split_subsets.json"))
    parser.add_argument("--decode", action="store_true", help="time the language models' decode steps instead")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    args = parser.parse_args()
    dirs = {"rtn": args.dirs / "optimum", "split": args.dirs / "data-free"}
    variants = {}
    for name in filter(None, args.variants.split(",")):
        dirs[name] = args.work / name
        variants[name] = write_variant(args.dirs / "data-free", dirs[name], VARIANTS[name])
        print(name, variants[name], flush=True)
    if args.decode:
        irs = ",".join(f"{name}={path}" for name, path in dirs.items())
        argv = ["--irs", irs, "--rounds", str(args.rounds), "--prefill-reps", "1", "--decode-steps", "32"]
        argv += ["--out", str(args.out)]
        inference.main(argv)
        return
    latency = named_models.measure_latency(dirs, True, args.rounds, args.new_tokens)
    for name, values in latency.items():
        ratios = f"{values['tpot_ratio']:.3f}x, TTFT {values['ttft_ratio']:.3f}x"
        print(f"{name:<12} TPOT {values['tpot_ms']:.1f} ms ({ratios})")
    record = {"cpu": named_models.cpu(), "rounds": args.rounds, "variants": variants, "latency": latency}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
