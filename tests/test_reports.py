"""Tests of nncf_hqq.llm.reports: the text table of the results."""

from __future__ import annotations

from nncf_hqq.llm.reports import format_table


def test_format_table_lists_every_model_with_extra_columns() -> None:
    results = {"fp": {"ppl": 10.0, "kl": 0.0, "top1": 1.0}, "hqq": {"ppl": 11.5, "kl": 0.01, "top1": 0.9}}
    table = format_table(results, {"hqq": {"compress s": 3.25}})
    lines = table.splitlines()
    assert lines[0].split() == ["model", "PPL", "KL", "top-1", "compress", "s"]
    assert lines[2].split()[:4] == ["fp", "10.000", "0.00000", "1.0000"]
    assert lines[3].split() == ["hqq", "11.500", "0.01000", "0.9000", "3.2"]
