"""The process's anonymous memory, for the research probes (run from the repository root: ``python research/X.py``)."""

from __future__ import annotations


def anonymous_gib() -> float:
    """``RssAnon`` of ``/proc/self/status`` in GiB (0 where there is none: not Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return 0.0
    return 0.0
