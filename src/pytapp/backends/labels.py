"""Einsum strings for backends that speak einsum (tblis, torch): one letter per label.

Letters are assigned per product, so a program may use any number of distinct labels; one
product may use at most 52.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from pytapp.analysis.spec import ContractionSpec
from pytapp.errors import ErrorCode, error_for

__all__ = ["LETTERS", "einsum_words"]

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def einsum_words(spec: ContractionSpec, backend: str,
                 d_labels: Sequence[Hashable] | None = None) -> tuple[str, str, str]:
    """Letters for the merged (unique) labels of A, B and D (or ``d_labels``).

    Raises
    ------
    UnsupportedError
        Code 18 when the product has more than 52 distinct labels.
    """
    letters: dict[Hashable, str] = {}
    labels = [*spec.a.modes.labels, *spec.b.modes.labels, *spec.d.modes.labels]
    for x in labels:
        if x not in letters:
            if len(letters) == len(LETTERS):
                raise error_for(
                    ErrorCode.UNSUPPORTED,
                    f"backend {backend!r} takes at most {len(LETTERS)} distinct labels per "
                    "product; use the blas or reference backend",
                )
            letters[x] = LETTERS[len(letters)]
    d = spec.d.modes.labels if d_labels is None else d_labels
    return (
        "".join(letters[x] for x in spec.a.modes.labels),
        "".join(letters[x] for x in spec.b.modes.labels),
        "".join(letters[x] for x in d),
    )
