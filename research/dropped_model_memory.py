"""Anonymous memory after a compressed model's last reference is dropped, before any garbage collection.

Compresses the Qwen2.5-1.5B-shaped IR (``nncf_hqq.llm.zoo.qwen_ov_dir``) with ``nncf-hqq compress``'s data-free
options, drops it, and prints the process's anonymous memory before, with the model, after the drop and after a
``gc.collect``: a model kept alive by a reference cycle shows as memory that only the collection returns.

    python research/dropped_model_memory.py
"""

from __future__ import annotations

import gc

from _memory import anonymous_gib  # research/, first on the path when run as a script

from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.zoo import qwen_ov_dir
from nncf_hqq.openvino.pages import release_file_mappings
from nncf_hqq.openvino.pages import return_free_heap


def main() -> None:
    xml = ir_xml(qwen_ov_dir())
    gc.collect()
    return_free_heap()
    before = anonymous_gib()
    model = compress_model(read_model(xml), CompressionOptions())
    release_file_mappings(xml.with_suffix(".bin"))
    return_free_heap()
    held = anonymous_gib()
    del model
    return_free_heap()
    dropped = anonymous_gib()
    gc.collect()
    return_free_heap()
    print(
        f"anonymous GiB: before {before:.2f}, with the model {held:.2f}, after the drop {dropped:.2f}, "
        f"after gc.collect {anonymous_gib():.2f}"
    )


if __name__ == "__main__":
    main()
