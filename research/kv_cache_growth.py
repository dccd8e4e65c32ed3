"""How much memory self-calibration's generation takes beyond the weights, against its keys and values.

Generates ``--sequences`` sequences of each length in ``--lengths`` with SmolLM2-135M's IR (``nncf_hqq.llm.zoo``),
in a fresh process per length, sampling the process's anonymous memory every 20 ms, and prints the growth over
the memory before generation beside the f32 keys and values the sequences hold (the source of
``nncf_hqq.llm.memory.KV_CACHE_GROWTH``).

    python research/kv_cache_growth.py --lengths 32,64,100,128,160
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import threading
import time

from _memory import anonymous_gib  # research/, first on the path when run as a script

#: SmolLM2-135M's layers, key/value heads and head size.
LAYERS, KV_HEADS, HEAD_DIM = 30, 3, 64


def measure(sequences: int, length: int) -> None:
    import openvino as ov

    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.zoo import smollm2_ov_dir
    from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
    from nncf_hqq.self_calibration import generate_sequences

    model = ov.Core().read_model(ir_xml(smollm2_ov_dir()))
    gc.collect()
    base, peak, running = anonymous_gib(), [0.0], [True]

    def sample() -> None:
        while running[0]:
            peak[0] = max(peak[0], anonymous_gib())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    generate_sequences(
        model, SELF_CALIBRATION_DEFAULT.replace(num_samples=sequences, batch_size=sequences, seq_len=length)
    )
    running[0] = False
    sampler.join()
    kv = sequences * length * 2 * LAYERS * KV_HEADS * HEAD_DIM * 4 / 2**30
    print(f"{sequences} sequences x {length} tokens: grew {peak[0] - base:.3f} GiB; keys and values {kv:.3f} GiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--lengths", default="32,64,100,128,160")
    parser.add_argument("--_one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._one:
        measure(*args._one)
        return
    for length in args.lengths.split(","):
        subprocess.run([sys.executable, __file__, "--_one", str(args.sequences), length], check=True)


if __name__ == "__main__":
    main()
