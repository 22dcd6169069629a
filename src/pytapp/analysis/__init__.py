"""Pure structural analysis of a product: labels, layouts, cost. No arrays, no I/O."""

from pytapp.analysis.cost import flop_count
from pytapp.analysis.labels import LabelClasses, classify, merge_modes, normalize_labels
from pytapp.analysis.layout import footprint, self_aliases
from pytapp.analysis.spec import ContractionSpec, OperandSpec, build_spec

__all__ = [
    "ContractionSpec",
    "LabelClasses",
    "OperandSpec",
    "build_spec",
    "classify",
    "flop_count",
    "footprint",
    "merge_modes",
    "normalize_labels",
    "self_aliases",
]
