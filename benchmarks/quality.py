"""Model quality of HQQ variants vs NNCF's RTN on real models (shared/PROTOCOL.md).

    python benchmarks/quality.py --model smollm2                      # the whole SmolLM2 table
    python benchmarks/quality.py --model smollm2 --windows 10 --rows rtn,hqq_reference,default
    python benchmarks/quality.py --model qwen --windows 20 --sequential   # Qwen2.5-1.5B-shaped, g128
    python benchmarks/quality.py --model minilm                       # all-MiniLM-L6-v2, embedding cosine
    python benchmarks/quality.py --model mpnet --rows rtn,default     # all-mpnet-base-v2, embedding cosine

Every row compresses the same float model (INT4_ASYM, ratio 1, backup_mode NONE: only decoder/encoder
MatMul weights differ between rows) and is evaluated on identical inputs. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov
from _sequential import evaluate_against
from _sequential import reference_log_probs
from _sequential import reference_metrics

from nncf_hqq import HQQ_DEFAULT
from nncf_hqq import HQQ_REFERENCE
from nncf_hqq import HQQParameters
from nncf_hqq import LowBitMode
from nncf_hqq.llm.encoders import ENCODER_CONFIG
from nncf_hqq.llm.encoders import mean_pooled
from nncf_hqq.llm.evaluation import compile_model
from nncf_hqq.llm.evaluation import evaluate_llms
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.records import versions
from nncf_hqq.llm.sanity import generation_bos_token_id
from nncf_hqq.llm.texts import calibration_samples
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.texts import token_calibration_samples
from nncf_hqq.llm.texts import tokenize_text
from nncf_hqq.llm.texts import wikitext_lines
from nncf_hqq.llm.texts import wikitext_windows
from nncf_hqq.llm.zoo import cache_dir
from nncf_hqq.llm.zoo import minilm_ov_dir
from nncf_hqq.llm.zoo import mpnet_ov_dir
from nncf_hqq.llm.zoo import qwen_ov_dir
from nncf_hqq.llm.zoo import shared_path
from nncf_hqq.llm.zoo import smollm2_ov_dir
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import SelfCalibration
from nncf_hqq.self_calibration import calibration_inputs
from nncf_hqq.self_calibration import generate_sequences

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
SHAKESPEARE = "data/tinyshakespeare/input.txt"
#: The published solver, returning its best iterate: the variants below add to it.
BASE = HQQ_REFERENCE

#: Rows of the table: None is NNCF's RTN, otherwise the HQQ parameters of the row.
ROWS: dict[str, HQQParameters | None] = {
    "rtn": None,
    "hqq_reference": HQQ_REFERENCE,
    "hqq_group_stop": dataclasses.replace(BASE, early_stop_scope="group"),
    "hqq_p1": dataclasses.replace(BASE, lp_norm=1.0),
    "hqq_norm_gain": dataclasses.replace(BASE, importance="norm_gain"),
    "ls5": dataclasses.replace(BASE, refine_rounds=5),
    "ls5_norm_gain": dataclasses.replace(BASE, refine_rounds=5, importance="norm_gain"),
    "int_zp_ls5": dataclasses.replace(BASE, refine_rounds=5, zero_point_format="integer"),
    "int_zp_ls5_norm_gain": dataclasses.replace(
        BASE, refine_rounds=5, zero_point_format="integer", importance="norm_gain"
    ),
    "hqq_guard": dataclasses.replace(BASE, rtn_guard=True),
    "ls5_norm_gain_guard": dataclasses.replace(BASE, refine_rounds=5, importance="norm_gain", rtn_guard=True),
    "ls5_x": dataclasses.replace(BASE, refine_rounds=5, preserve_extremes=True),
    "ls5_norm_gain_x": dataclasses.replace(BASE, refine_rounds=5, importance="norm_gain", preserve_extremes=True),
    "ls5_norm_gain_guard_x": dataclasses.replace(
        BASE, refine_rounds=5, importance="norm_gain", rtn_guard=True, preserve_extremes=True
    ),
    "ls10_norm_gain_guard": dataclasses.replace(BASE, refine_rounds=10, importance="norm_gain", rtn_guard=True),
    "int_zp_ls5_x": dataclasses.replace(BASE, refine_rounds=5, zero_point_format="integer", preserve_extremes=True),
    "int_zp_ls5_norm_gain_guard_x": dataclasses.replace(
        BASE,
        refine_rounds=5,
        zero_point_format="integer",
        importance="norm_gain",
        rtn_guard=True,
        preserve_extremes=True,
    ),
    "ls5_rtn_v": dataclasses.replace(BASE, refine_rounds=5, rtn_roles=("value",)),
    "ls5_norm_gain_guard_rtn_v": dataclasses.replace(
        BASE, refine_rounds=5, importance="norm_gain", rtn_guard=True, rtn_roles=("value",)
    ),
    "ls5_norm_gain_guard_rtn_kv": dataclasses.replace(
        BASE, refine_rounds=5, importance="norm_gain", rtn_guard=True, rtn_roles=("key", "value")
    ),
    "ls10_norm_gain_guard_rtn_v": dataclasses.replace(
        BASE, refine_rounds=10, importance="norm_gain", rtn_guard=True, rtn_roles=("value",)
    ),
    "default_rtn_qkv": dataclasses.replace(HQQ_DEFAULT, rtn_roles=("query", "key", "value")),
    # "_pe" rows: their names from before preserve_extremes joined the default (kept for the recorded commands)
    "default_pe": HQQ_DEFAULT,
    "default_hqq_v": dataclasses.replace(HQQ_DEFAULT, rtn_roles=()),
    "default_pe_no_norm_gain": dataclasses.replace(HQQ_DEFAULT, importance="none"),
    "default_int": dataclasses.replace(HQQ_DEFAULT, zero_point_format="integer"),
    "awq_df": None,
    "awq_df_hqq": HQQ_DEFAULT,
    "awq_df_hqq_int": dataclasses.replace(HQQ_DEFAULT, zero_point_format="integer"),
    "awq_df_hqq_split": dataclasses.replace(HQQ_DEFAULT, zero_point_format="split"),
    # the default with the published lp shrinkage, and the row that measured leaving it out (as
    # beta=1e-3 then: no error reaches that beta's shrinkage-free bound of ~200, so the same as the default now)
    "awq_df_hqq_shrink": dataclasses.replace(HQQ_DEFAULT, shrinkage=True),
    "awq_df_hqq_no_shrink": HQQ_DEFAULT,
    "default": HQQ_DEFAULT,
    "default_split": dataclasses.replace(HQQ_DEFAULT, zero_point_format="split"),
    "default_shrink": dataclasses.replace(HQQ_DEFAULT, shrinkage=True),
    "default_no_unit_gain": dataclasses.replace(HQQ_DEFAULT, unit_gain=False),
    # ablations of the default for the NNCF pull request's core (docs/upstreaming.md)
    "default_no_guard": dataclasses.replace(HQQ_DEFAULT, rtn_guard=False),
    "default_no_proximal": dataclasses.replace(HQQ_DEFAULT, iterations=0),
    # cheaper solvers for the compression-speed target (issue 47, item 5)
    "default_iterations4": dataclasses.replace(HQQ_DEFAULT, iterations=4),
    "default_refine2": dataclasses.replace(HQQ_DEFAULT, refine_rounds=2),
    "default_refine1": dataclasses.replace(HQQ_DEFAULT, refine_rounds=1),
    "default_no_proximal_refine2": dataclasses.replace(HQQ_DEFAULT, iterations=0, refine_rounds=2),
    "default_no_norm_gain_no_guard": dataclasses.replace(HQQ_DEFAULT, importance="none", rtn_guard=False),
    "awq_se": None,
    "awq_se_hqq": HQQ_DEFAULT,
    "awq_se_hqq_no_guard": dataclasses.replace(HQQ_DEFAULT, output_guard=False),
    "awq_se_hqq_tok32_held_out": dataclasses.replace(HQQ_DEFAULT, calibration_token_rows=32, guard_held_out=True),
    # self-calibrated: the same pipelines on text the float model generated (``nncf_hqq.self_calibration``)
    "self_awq": None,
    "self_awq_se": None,
    "self_awq_se_hqq": HQQ_DEFAULT,
    "self_awq_se_hqq_no_guard": dataclasses.replace(HQQ_DEFAULT, output_guard=False),
    "self_awq_se_hqq_no_se_reference": dataclasses.replace(HQQ_DEFAULT, guard_reference=False),
    "self_se": None,
    "self_se_hqq": HQQ_DEFAULT,
    "self_se_hqq_no_guard": dataclasses.replace(HQQ_DEFAULT, output_guard=False),
    # NNCF's GPTQ (alone and with its Scale Estimation) on the same generated text
    "self_gptq": None,
    "self_gptq_se": None,
    # HQQ's refinement and guard on k token rows per sample instead of NNCF's per-sample means
    **{
        f"self_{steps}_hqq_tok{k}": dataclasses.replace(HQQ_DEFAULT, calibration_token_rows=k)
        for steps in ("awq_se", "se")
        for k in (4, 8, 16, 32)
    },
    # ... and the guard judging on the half of the samples the refinement did not fit (data-free HQQ competing)
    **{
        f"self_awq_se_hqq_tok{k}_held_out": dataclasses.replace(
            HQQ_DEFAULT, calibration_token_rows=k, guard_held_out=True
        )
        for k in (0, 8, 16, 32)
    },
    # ... and the guard also weighing HQQ's grid with GPTQ's error-feedback rounding on the token rows (damp 0.1 or
    # 0.01; "_held_out": fitted on half of the samples, judged on the other half)
    **{
        f"self_{steps}_hqq_tok{k}_ef{tag}{suffix}": dataclasses.replace(
            HQQ_DEFAULT,
            calibration_token_rows=k,
            error_feedback=True,
            error_feedback_damp=damp,
            guard_held_out=bool(suffix),
        )
        for steps in ("awq_se", "se")
        for k in (32, 64)
        for tag, damp in (("", 0.1), ("01", 0.01))
        for suffix in ("", "_held_out")
    },
    # Scale Estimation alone on Tiny Shakespeare (also for the MiniLM encoder, as 128-token windows)
    **{
        f"ts_se_hqq_tok{k}{suffix}": dataclasses.replace(
            HQQ_DEFAULT, calibration_token_rows=k, guard_held_out=bool(suffix)
        )
        for k in (8, 32)
        for suffix in ("", "_held_out")
    },
    "ts_se": None,
    "ts_se_hqq": HQQ_DEFAULT,
    "ts_se_hqq_no_guard": dataclasses.replace(HQQ_DEFAULT, output_guard=False),
    "ts_se_hqq_no_se_reference": dataclasses.replace(HQQ_DEFAULT, guard_reference=False),
}

#: Other modes: NNCF's symmetric ones (RTN and HQQ) and HQQ's asymmetric low-bit modes.
for _bits in (4, 3, 2):
    ROWS[f"int{_bits}_sym_rtn"] = None
    ROWS[f"int{_bits}_sym_hqq"] = HQQ_DEFAULT
for _bits in (3, 2):
    ROWS[f"int{_bits}_asym_hqq"] = HQQ_DEFAULT
#: Symmetric variants: the least-squares refinement from NNCF's scale without the proximal loop, the published
#: solver, only the floor that keeps both ends of a group unclipped, and the refinement unweighted.
SYMMETRIC_VARIANTS = {
    "int4_sym_refine_only": dataclasses.replace(HQQ_DEFAULT, iterations=0),
    "int4_sym_published": HQQ_REFERENCE,
    "int4_sym_floor_only": HQQ_REFERENCE.replace(iterations=0, preserve_extremes=True),
    "int4_sym_floor_refine_unweighted": dataclasses.replace(HQQ_DEFAULT, iterations=0, importance="none"),
    "int4_sym_rtn_unit_gain": HQQ_REFERENCE.replace(iterations=0, unit_gain=True),
    "int4_sym_clip": dataclasses.replace(HQQ_DEFAULT, preserve_extremes=False),
}
ROWS.update(SYMMETRIC_VARIANTS)
ROWS["default_pe_hqq_v"] = ROWS["default_hqq_v"]

#: Extra ``compress_weights`` options of some rows (data-free AWQ: ``awq=True`` without a dataset; other modes).
#: ``calibrated`` rows get a dataset of ``--calibration-samples`` random 256-token windows of ``--calibration-text``.
ROW_OPTIONS: dict[str, dict[str, Any]] = {
    "awq_df": {"awq": True},
    "awq_df_hqq": {"awq": True},
    "awq_df_hqq_int": {"awq": True},
    "awq_df_hqq_split": {"awq": True},
    "awq_df_hqq_no_shrink": {"awq": True},
    "awq_df_hqq_shrink": {"awq": True},
    "awq_se": {"awq": True, "scale_estimation": True, "calibrated": True},
    "awq_se_hqq": {"awq": True, "scale_estimation": True, "calibrated": True},
    "awq_se_hqq_no_guard": {"awq": True, "scale_estimation": True, "calibrated": True},
    "awq_se_hqq_tok32_held_out": {"awq": True, "scale_estimation": True, "calibrated": True},
    "self_awq": {"awq": True, "self_calibrated": True},
    "self_awq_se": {"awq": True, "scale_estimation": True, "self_calibrated": True},
    "self_awq_se_hqq": {"awq": True, "scale_estimation": True, "self_calibrated": True},
    "self_awq_se_hqq_no_guard": {"awq": True, "scale_estimation": True, "self_calibrated": True},
    "self_awq_se_hqq_no_se_reference": {"awq": True, "scale_estimation": True, "self_calibrated": True},
    **{
        row: {"scale_estimation": True, "self_calibrated": True}
        for row in ("self_se", "self_se_hqq", "self_se_hqq_no_guard")
    },
    "self_gptq": {"gptq": True, "self_calibrated": True},
    "self_gptq_se": {"gptq": True, "scale_estimation": True, "self_calibrated": True},
    **{
        f"self_awq_se_hqq_tok{k}": {"awq": True, "scale_estimation": True, "self_calibrated": True}
        for k in (4, 8, 16, 32)
    },
    **{f"self_se_hqq_tok{k}": {"scale_estimation": True, "self_calibrated": True} for k in (4, 8, 16, 32)},
    **{
        f"self_{steps}_hqq_tok{k}_ef{tag}{suffix}": {
            "awq": steps == "awq_se",
            "scale_estimation": True,
            "self_calibrated": True,
        }
        for steps in ("awq_se", "se")
        for k in (32, 64)
        for tag in ("", "01")
        for suffix in ("", "_held_out")
    },
    **{
        f"self_awq_se_hqq_tok{k}_held_out": {"awq": True, "scale_estimation": True, "self_calibrated": True}
        for k in (0, 8, 16, 32)
    },
    **{
        row: {"scale_estimation": True, "calibrated": True}
        for row in ("ts_se", "ts_se_hqq", "ts_se_hqq_no_guard", "ts_se_hqq_no_se_reference")
    },
    **{
        f"ts_se_hqq_tok{k}{suffix}": {"scale_estimation": True, "calibrated": True}
        for k in (8, 32)
        for suffix in ("", "_held_out")
    },
    **{f"int{b}_sym_{m}": {"mode": nncf.CompressWeightsMode(f"int{b}_sym")} for b in (4, 3, 2) for m in ("rtn", "hqq")},
    **{f"int{b}_asym_hqq": {"mode": LowBitMode(f"int{b}_asym")} for b in (3, 2)},
    **{name: {"mode": nncf.CompressWeightsMode.INT4_SYM} for name in SYMMETRIC_VARIANTS},
}

MODELS: dict[str, tuple[Callable[[], Path], int]] = {
    "smollm2": (smollm2_ov_dir, 64),
    "qwen": (qwen_ov_dir, 128),
    "minilm": (minilm_ov_dir, 64),
    "mpnet": (mpnet_ov_dir, 64),
}
#: The sentence encoders among ``MODELS``: judged by the cosine of mean-pooled embeddings, not perplexity.
ENCODERS = ("minilm", "mpnet")
#: Whether the model of this run is one of ``ENCODERS`` (its calibrated rows then get encoder inputs).
RUN_MODEL = {"encoder": False}


#: Calibration windows of the ``calibrated`` rows (``--calibration-samples``) and their text (``--calibration-text``).
CALIBRATION_SAMPLES: dict[str, Any] = {"samples": 128, "text": "shakespeare"}
#: ``--calibration-text wikitext``: windows of WikiText-2 test text from this token on, after every evaluated window
#: (the tables evaluate at most 40 windows of 512 tokens), so the text is in-domain but shares no evaluated token.
WIKITEXT_HELD_OUT_FROM = 64 * 512


def llm_calibration_samples(ir_dir: Path, count: int) -> list[dict[str, np.ndarray]]:
    """The ``calibrated`` rows' LLM samples: ``count`` random 256-token windows (seed 0) of the calibration text."""
    tokenizer = load_tokenizer(ir_dir)
    if CALIBRATION_SAMPLES["text"] == "shakespeare":
        return calibration_samples(tokenizer, shared_path(SHAKESPEARE), count)
    ids = tokenize_text(tokenizer, shared_path(WIKITEXT))[WIKITEXT_HELD_OUT_FROM:]
    return token_calibration_samples(ids, count, source="WikiText-2 after the evaluated windows")


#: How the ``self_calibrated`` rows' text is generated (``--self-*`` options; the start token: the model's BOS).
SELF_CALIBRATION: dict[str, Any] = {"params": SELF_CALIBRATION_DEFAULT, "seconds": {}}
#: ``--fresh-statistics``: collect the activation statistics in every row (compression times then compare);
#: otherwise the rows calibrated on the same data share NNCF's cached statistics.
FRESH_STATISTICS = {"fresh": False}


#: Tokens per calibration window of the encoder rows.
ENCODER_WINDOW = 128


def encoder_calibration_samples(ir_dir: Path, count: int) -> list[dict[str, np.ndarray]]:
    """``count`` windows of ``ENCODER_WINDOW`` tokens at random starts (seed 0) of Tiny Shakespeare, as encoder
    inputs (``input_ids``, ``attention_mask`` and, where the model takes it, ``token_type_ids``: MPNet does not)."""
    ids = tokenize_text(load_tokenizer(ir_dir), shared_path(SHAKESPEARE))
    starts = np.random.default_rng(0).integers(0, ids.size - ENCODER_WINDOW + 1, size=count)
    windows = [ids[s : s + ENCODER_WINDOW].reshape(1, -1).astype(np.int64) for s in starts]
    names = {name for port in ov.Core().read_model(ir_xml(ir_dir)).inputs for name in port.get_names()}
    samples = [{"input_ids": w, "attention_mask": np.ones_like(w), "token_type_ids": np.zeros_like(w)} for w in windows]
    return [{name: value for name, value in sample.items() if name in names} for sample in samples]


#: The user turn of the ``--self-start chat`` rows: generation continues as the model's answer.
CHAT_PROMPT = "Write a long, detailed text on any topic you like."


def chat_start_tokens(ir_dir: Path) -> list[int]:
    """The model's chat template applied to ``CHAT_PROMPT``, up to the start of the assistant's answer."""
    tokenizer = load_tokenizer(ir_dir)
    messages = [{"role": "user", "content": CHAT_PROMPT}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


#: ``--self-prompt-text``: (text, first token) of the short user text; the WikiText-2 slice starts after every
#: evaluated window (``WIKITEXT_HELD_OUT_FROM``), so none of it is evaluated.
PROMPT_TEXTS = {"wikitext": (WIKITEXT, WIKITEXT_HELD_OUT_FROM), "shakespeare": (SHAKESPEARE, 0)}


def prompt_token_ids(ir_dir: Path, name: str, tokens: int) -> tuple[int, ...]:
    """``tokens`` consecutive token ids of the ``PROMPT_TEXTS`` text ``name``."""
    path, first = PROMPT_TEXTS[name]
    ids = tokenize_text(load_tokenizer(ir_dir), shared_path(path))[first : first + tokens]
    return tuple(int(i) for i in ids)


def self_calibration_samples(ir_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """The ``self_calibrated`` rows' samples: sequences the float model generates (cached on disk by settings, so
    that every row and run of a setting calibrates on the same text; the generation time is recorded once)."""
    params: SelfCalibration = SELF_CALIBRATION["params"]
    start = SELF_CALIBRATION.get("start", "bos")
    if start == "chat":
        params = params.replace(start_token_ids=tuple(chat_start_tokens(ir_dir)))
    if "prompt" in SELF_CALIBRATION:
        name, tokens, length = SELF_CALIBRATION["prompt"]
        params = params.replace(prompt_token_ids=prompt_token_ids(ir_dir, name, tokens), prompt_len=length)
    bos = generation_bos_token_id(ir_dir) if start == "bos" else None
    if params.start_token_ids is None and bos is not None:
        params = params.replace(start_token_ids=(bos,))
    key = "_".join(f"{k}{v}" for k, v in dataclasses.asdict(params).items()).replace(" ", "")
    if len(key) > 120:  # long start prompts (--self-start chat): a digest keeps the file name short
        key = key[:80] + "_" + hashlib.sha256(key.encode()).hexdigest()[:16]
    path = cache_dir() / "self_calibration" / ir_dir.name / f"{key}.npy"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        sequences = generate_sequences(ov.Core().read_model(ir_xml(ir_dir)), params)
        SELF_CALIBRATION["seconds"][str(path.name)] = time.perf_counter() - start
        np.save(path, sequences)
    return calibration_inputs(np.load(path)), path.stem


def compress(
    ir_dir: Path, group_size: int, params: HQQParameters | None, options: dict[str, Any] | None = None
) -> tuple[ov.Model, float]:
    model = ov.Core().read_model(ir_xml(ir_dir))
    options = dict(options or {})
    mode = options.pop("mode", nncf.CompressWeightsMode.INT4_ASYM)
    # NNCF's statistics cache holds neither HQQ's token rows nor GPTQ's full layer inputs: such rows collect theirs
    fresh = (
        FRESH_STATISTICS["fresh"]
        or (params is not None and params.calibration_token_rows > 0)
        or bool(options.get("gptq"))
    )
    if options.pop("calibrated", False):
        count = CALIBRATION_SAMPLES["samples"]
        if RUN_MODEL["encoder"]:
            samples = encoder_calibration_samples(ir_dir, count)
        else:
            samples = llm_calibration_samples(ir_dir, count)
        options["dataset"] = nncf.Dataset(samples)
        # the calibrated rows share NNCF's cached activation statistics (collected once per model and count);
        # that cache holds no token rows, so the token-row rows collect their statistics in the run
        if not fresh:
            text = "" if CALIBRATION_SAMPLES["text"] == "shakespeare" else "_wikitext"
            statistics = cache_dir() / "statistics" / f"{ir_dir.name}_{count}x256{text}"
            options["advanced_parameters"] = nncf.AdvancedCompressionParameters(statistics_path=str(statistics))
    if options.pop("self_calibrated", False):
        samples, key = self_calibration_samples(ir_dir)
        options["dataset"] = nncf.Dataset(samples)
        if not fresh:
            statistics = cache_dir() / "statistics" / f"{ir_dir.name}_self_{key}"
            options["advanced_parameters"] = nncf.AdvancedCompressionParameters(statistics_path=str(statistics))
    start = time.perf_counter()
    model = nncf.compress_weights(
        model,
        mode=mode,
        group_size=group_size,
        ratio=1.0,
        backup_mode=nncf.BackupMode.NONE,
        hqq=params is not None,
        hqq_params=params,
        **options,
    )
    return model, time.perf_counter() - start


def constant_megabytes(model: ov.Model) -> float:
    """Bytes of all constants (weights, codes, scales, zero points) in MiB: the weights' size in the IR."""
    return sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant") / 2**20


def encoder_cosines(ir_dir: Path, models: dict[str, ov.Model], lines: list[str]) -> dict[str, dict[str, float]]:
    """Mean and minimum over ``lines`` of the cosine between each model's and the float encoder's mean-pooled
    embeddings (the float embeddings computed once)."""
    tokenizer = load_tokenizer(ir_dir)
    reference = mean_pooled(compile_model(ir_dir, ENCODER_CONFIG), tokenizer, lines)
    results = {}
    for name, model in models.items():
        candidate = mean_pooled(compile_model(model, ENCODER_CONFIG), tokenizer, lines)
        norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
        cosines = (reference * candidate).sum(axis=1) / norms
        results[name] = {"cosine": float(cosines.mean()), "cosine_min": float(cosines.min())}
    return results


def evaluate(model_name: str, ir_dir: Path, models: dict[str, ov.Model], windows: int) -> dict[str, Any]:
    if model_name in ENCODERS:
        return encoder_cosines(ir_dir, models, wikitext_lines(shared_path(WIKITEXT), windows * 10))
    tokenizer = load_tokenizer(ir_dir)
    token_windows = wikitext_windows(tokenizer, shared_path(WIKITEXT), windows)
    return evaluate_llms(ir_dir, models, token_windows)


def evaluate_sequentially(
    model_name: str, ir_dir: Path, group_size: int, rows: list[str], windows: int, times: dict[str, float]
) -> dict[str, dict[str, float]]:
    """Like ``evaluate``, one compressed model in memory at a time (FP log-probs cached on disk)."""
    token_windows = wikitext_windows(load_tokenizer(ir_dir), shared_path(WIKITEXT), windows)
    reference = reference_log_probs(ir_dir, cache_dir() / "fp_logp" / model_name, token_windows)
    fp_mib = constant_megabytes(ov.Core().read_model(ir_xml(ir_dir)))
    results = {"fp": {**reference_metrics(token_windows, reference), "weights_mib": fp_mib}}
    for row in rows:
        model, times[row] = compress(ir_dir, group_size, ROWS[row], ROW_OPTIONS.get(row))
        results[row] = {**evaluate_against(model, token_windows, reference), "weights_mib": constant_megabytes(model)}
        del model
        print(f"{row}: {results[row]}", flush=True)
    return results


def print_table(results: dict[str, dict[str, float]], times: dict[str, float]) -> None:
    metrics = [k for k in ("ppl", "kl", "top1", "cosine", "cosine_min") if k in next(iter(results.values()))]
    print(f"{'row':<24}" + "".join(f"{m:>11}" for m in metrics) + f"{'compress s':>12}")
    for name, values in results.items():
        cells = "".join(f"{values[m]:>11.4f}" for m in metrics)
        print(f"{name:<24}{cells}{times.get(name, 0.0):>12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--windows", type=int, default=None, help="LLM windows; encoders: x10 lines")
    parser.add_argument("--group-size", type=int, default=None)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows: " + ",".join(ROWS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--size-only", action="store_true", help="compress and report the weights' size only")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="one compressed model in memory at a time, FP log-probs cached on disk (needed for qwen on 23 GB)",
    )
    parser.add_argument("--calibration-samples", type=int, default=128, help="windows for the calibrated rows")
    parser.add_argument(
        "--calibration-text",
        choices=("shakespeare", "wikitext"),
        default="shakespeare",
        help="the calibrated LLM rows' text: Tiny Shakespeare, or WikiText-2 test text after the evaluated windows",
    )
    parser.add_argument("--self-samples", type=int, default=SELF_CALIBRATION_DEFAULT.num_samples)
    parser.add_argument("--self-seq-len", type=int, default=SELF_CALIBRATION_DEFAULT.seq_len)
    parser.add_argument("--self-temperature", type=float, default=SELF_CALIBRATION_DEFAULT.temperature)
    parser.add_argument("--self-top-p", type=float, default=SELF_CALIBRATION_DEFAULT.top_p)
    parser.add_argument("--self-seed", type=int, default=SELF_CALIBRATION_DEFAULT.seed)
    parser.add_argument(
        "--self-start",
        choices=("bos", "random", "chat"),
        default="bos",
        help="start: the model's BOS token, a random token, or its chat template with a short request",
    )
    parser.add_argument(
        "--self-prompt-text",
        choices=("wikitext", "shakespeare"),
        help="mix in a short user text: every sequence continues --self-prompt-len tokens of it (see PROMPT_TEXTS)",
    )
    parser.add_argument("--self-prompt-tokens", type=int, default=1024, help="tokens of the short user text")
    parser.add_argument("--self-prompt-len", type=int, default=SELF_CALIBRATION_DEFAULT.prompt_len)
    parser.add_argument(
        "--fresh-statistics",
        action="store_true",
        help="collect activation statistics in every calibrated row (no shared cache): compression times compare",
    )
    args = parser.parse_args()
    FRESH_STATISTICS["fresh"] = args.fresh_statistics
    CALIBRATION_SAMPLES["samples"] = args.calibration_samples
    CALIBRATION_SAMPLES["text"] = args.calibration_text
    SELF_CALIBRATION["params"] = SELF_CALIBRATION_DEFAULT.replace(
        num_samples=args.self_samples,
        seq_len=args.self_seq_len,
        temperature=args.self_temperature,
        top_p=args.self_top_p,
        seed=args.self_seed,
    )
    SELF_CALIBRATION["start"] = args.self_start
    if args.self_prompt_text:
        SELF_CALIBRATION["prompt"] = (args.self_prompt_text, args.self_prompt_tokens, args.self_prompt_len)

    get_dir, default_group = MODELS[args.model]
    group_size = args.group_size or default_group
    RUN_MODEL["encoder"] = args.model in ENCODERS
    windows = args.windows or (20 if args.model in ENCODERS else {"smollm2": 40, "qwen": 20}[args.model])
    ir_dir = get_dir()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}")
    times: dict[str, float] = {}
    if args.size_only:
        sizes = {}
        for row in rows:
            model, times[row] = compress(ir_dir, group_size, ROWS[row], ROW_OPTIONS.get(row))
            sizes[row] = constant_megabytes(model)
            print(f"{row:<24}{sizes[row]:>10.1f} MiB{times[row]:>10.1f} s", flush=True)
        out = args.out or Path(f"results/sizes_{args.model}_g{group_size}.json")
        out.write_text(json.dumps({"weights_mib": sizes, "compress_seconds": times}, indent=2))
        return
    if args.sequential and args.model not in ENCODERS:
        results = evaluate_sequentially(args.model, ir_dir, group_size, rows, windows, times)
    else:
        models = {}
        for row in rows:
            models[row], times[row] = compress(ir_dir, group_size, ROWS[row], ROW_OPTIONS.get(row))
        results = evaluate(args.model, ir_dir, models, windows)
    print_table(results, times)
    out = args.out or Path(f"results/quality_{args.model}_g{group_size}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "model": args.model,
        "group_size": group_size,
        "windows": windows,
        "calibration_samples": args.calibration_samples,
        "calibration_text": args.calibration_text,
        "fresh_statistics": args.fresh_statistics,
        "self_calibration": {
            **dataclasses.asdict(SELF_CALIBRATION["params"]),
            "start": args.self_start,
            "prompt_text": SELF_CALIBRATION.get("prompt"),
            "generation_seconds": SELF_CALIBRATION["seconds"],
        },
        "rows": {
            r: {
                "hqq_params": dataclasses.asdict(p) if p else None,
                **{k: str(v) for k, v in ROW_OPTIONS.get(r, {}).items()},
            }
            for r, p in ROWS.items()
            if r in rows
        },
        "results": results,
        "compress_seconds": times,
        "versions": versions(),
    }
    out.write_text(json.dumps(record, indent=2, default=str))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
