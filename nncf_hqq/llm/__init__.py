"""Tooling around the library for LLMs: the compress and evaluate jobs as Python calls (``compress``, ``evaluate``),
the ``nncf-hqq`` command line and its demo, the evaluation protocol, and the real models used offline. The library
(everything else in ``nncf_hqq``) never imports this package.

``compress`` and ``evaluate`` are imported when first used, so that importing one module of the package does not
import them all.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompressionResult", "EvaluationResult", "OptionError", "compress", "evaluate"]


def __getattr__(name: str) -> Any:
    if name in ("compress", "CompressionResult"):
        from nncf_hqq.llm import compress_job

        return getattr(compress_job, name)
    if name in ("evaluate", "EvaluationResult"):
        from nncf_hqq.llm import evaluate_job

        return getattr(evaluate_job, name)
    if name == "OptionError":
        from nncf_hqq.llm.options import OptionError

        return OptionError
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
