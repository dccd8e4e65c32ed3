"""Does exporting a bf16 checkpoint in bf16 (what ``nncf-hqq compress HF_DIR`` does) instead of fp32 change the
accuracy of what it writes? Measured as shared/PROTOCOL.md says, on SmolLM2-135M saved as a bf16 checkpoint.

Data-free, the compressed constants are the same either way (tests/test_export_precision.py). With calibration
data they are not: NNCF's AWQ writes its rescaled weights, and the norm gains it folds the inverse scales into, back
in the IR's precision, so a bf16 IR rounds them to bf16 before HQQ quantizes them. This compresses the same bf16
checkpoint both ways with the self-calibrated default (and data-free, as the control) and evaluates every result
against the float model (the fp32 export of the bf16 checkpoint) on the first WINDOWS WikiText-2 windows.

    python research/bf16_export.py --windows 40 --json results/bf16_export.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bf16_checkpoint(work: Path) -> Path:
    """SmolLM2-135M-Instruct's HF dir saved in bf16 (tokenizer files copied)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from nncf_hqq.llm import zoo

    out = work / "smollm2-bf16"
    if (out / "config.json").is_file():
        return out
    source = zoo.smollm2_hf_dir()
    AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "nncf_hqq" / "bf16_export")
    p.add_argument("--windows", type=int, default=40)
    p.add_argument("--json", type=Path, default=Path("results/bf16_export.json"))
    args = p.parse_args()
    from nncf_hqq.llm import compress
    from nncf_hqq.llm import evaluate
    from nncf_hqq.llm.export import export_to_openvino

    checkpoint = bf16_checkpoint(args.work)
    fp32_ir = args.work / "fp32-ir"
    if not fp32_ir.is_dir():
        export_to_openvino(checkpoint, fp32_ir, dtype="fp32")
    rows = {}
    for recipe, self_calibration in {"self-calibrated": True, "data-free": False}.items():
        for export, source in {"bf16 export": checkpoint, "fp32 export": fp32_ir}.items():
            out = args.work / f"{recipe}-{export.split()[0]}"
            if not (out / "openvino_model.xml").is_file():
                compress(source, out, group_size=64, self_calibration=self_calibration)
            rows[f"{recipe}, {export}"] = out
    report = args.work / "evaluate.json"
    results = evaluate(rows, fp32_ir, windows=args.windows, json=report).results
    print(f"{'row':34} {'ppl':>8} {'kl':>8} {'top1':>7}")
    for name, m in results.items():
        print(f"{name:34} {m['ppl']:8.3f} {m['kl']:8.4f} {m['top1']:7.4f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"windows": args.windows, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
