"""Dispatch between the numpy/torch reference solver and a fast path (placeholder: reference only)."""

from __future__ import annotations

from nncf.tensor import Tensor

from nncf_hqq.parameters import HQQParameters
from nncf_hqq.solver import hqq_solve


def solve(weight: Tensor, axis: int, num_bits: int, params: HQQParameters) -> tuple[Tensor, Tensor]:
    """HQQ's inverse scale and zero point for grouped ``weight`` (see ``nncf_hqq.solver.hqq_solve``)."""
    return hqq_solve(weight, axis, num_bits, params)
