"""The pull requests of the series, in order: what each one adds to NNCF's tree and what it changes.

Each ``Patch`` is applied onto the tree the previous ones left:
- ``placed``: modules of this package that are NNCF code as they are, copied into the tree under NNCF's licence
  header (one source: the package imports the same module);
- ``files``: the folder under ``upstream/series/`` holding the files the patch adds in NNCF's layout (``src/nncf/...``,
  ``tests/...``), written under NNCF's licence header;
- ``edits``: anchored edits of the files already in the tree (NNCF's own, or an earlier patch's).
Its pull-request description is ``upstream/series/NNNN.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import edits_0001
import edits_0002
import edits_0003
import edits_0004
import edits_0005
from edit import Edit

SERIES_DIR = Path(__file__).resolve().parent / "series"
WC = "src/nncf/quantization/algorithms/weight_compression"


@dataclass(frozen=True)
class Patch:
    """One pull request of the series."""

    number: str
    name: str
    title: str
    placed: dict[str, str] = field(default_factory=dict)
    edits: tuple[Edit, ...] = ()

    @property
    def stem(self) -> str:
        return f"{self.number}-{self.name}"

    @property
    def files(self) -> Path:
        return SERIES_DIR / self.number

    @property
    def description(self) -> Path:
        return SERIES_DIR / f"{self.number}.md"

    @property
    def usage(self) -> Path:
        """Its section of NNCF's weight-compression Usage.md (``docs/usage/post_training_compression/``)."""
        return SERIES_DIR / f"{self.number}-usage.md"

    @property
    def cspell_words(self) -> Path:
        """The words its added lines bring that NNCF's cspell dictionaries lack, for NNCF's ``.ci/cspell_dict.txt``."""
        return SERIES_DIR / f"{self.number}-cspell-words.txt"


SERIES: tuple[Patch, ...] = (
    Patch(
        "0001",
        "hqq-weight-compression",
        "[WC] HQQ: data-free Half-Quadratic Quantization with float zero points (OpenVINO)",
        placed={"nncf_hqq/maths/zero_point_solver.py": f"{WC}/hqq_solver.py"},
        edits=tuple(edits_0001.EDITS),
    ),
    Patch("0002", "hqq-torch", "[WC] HQQ for PyTorch models", edits=tuple(edits_0002.EDITS)),
    Patch(
        "0003",
        "hqq-data-free-steps",
        "[WC] HQQ: least-squares refinement, input-energy weighting, per-group rounding fallback and unit gain",
        placed={"nncf_hqq/maths/data_free_steps.py": f"{WC}/hqq_steps.py"},
        edits=tuple(edits_0003.EDITS),
    ),
    Patch(
        "0004",
        "hqq-scale-estimation",
        "[WC] HQQ with Scale Estimation: the scale refinement on data, the output guard and token-row statistics",
        placed={
            "nncf_hqq/maths/scale_on_data.py": f"{WC}/hqq_scale_on_data.py",
            "nncf_hqq/maths/guard.py": f"{WC}/hqq_guard.py",
            "nncf_hqq/statistics.py": f"{WC}/hqq_statistics.py",
        },
        edits=tuple(edits_0004.EDITS),
    ),
    Patch(
        "0005",
        "hqq-integer-parameters",
        "[WC] HQQ with integer parameters: integer zero points and the symmetric modes",
        placed={"nncf_hqq/maths/integer.py": f"{WC}/hqq_integer.py"},
        edits=tuple(edits_0005.EDITS),
    ),
)
