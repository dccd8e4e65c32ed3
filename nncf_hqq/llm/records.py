"""The JSON records the jobs and the benchmarks write: one writer, and the versions of the stack they record."""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nncf
import openvino as ov

import nncf_hqq


def versions() -> dict[str, str]:
    """The versions a result depends on: NNCF, OpenVINO, nncf_hqq and Python."""
    return {
        "nncf": nncf.__version__,
        "openvino": ov.get_version(),
        "nncf_hqq": nncf_hqq.__version__,
        "python": platform.python_version(),
    }


def write_json(path: Path, record: Mapping[str, Any]) -> Path:
    """Write ``record`` to ``path`` as indented JSON (values JSON does not know, e.g. paths and enums, as text);
    the parent directory is created. Returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path
