"""Einsum letters for arbitrary labels: the one place labels become ``a-z, A-Z``.

TAPP labels may be any hashables; NumPy, torch, TBLIS and dask speak einsum strings of 52
letters. Letters are assigned per product in first-seen order, so a program may use any
number of distinct labels while one product may use at most 52.

Examples
--------
>>> m = letter_map([("x", 1), "y", ("x", 1)])
>>> m[("x", 1)], m["y"]
('a', 'b')
>>> words(["ik", "kj", "ij"])
('ab', 'bc', 'ac')
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from pytapp.errors import ErrorCode, TappError, error_for

__all__ = ["LETTERS", "einsum_text", "letter_map", "words"]

#: The 52 labels every einsum implementation accepts.
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def letter_map(labels: Iterable[Hashable], what: str = "this product") -> dict[Hashable, str]:
    """One letter per distinct label, in the order the labels are first seen.

    Parameters
    ----------
    labels
        Labels, repeats allowed.
    what
        Who needs the letters, for the error message.

    Returns
    -------
    dict
        Label -> letter.

    Raises
    ------
    UnsupportedError
        Code 18 when there are more than 52 distinct labels.

    Examples
    --------
    >>> letter_map("ijji")
    {'i': 'a', 'j': 'b'}
    """
    letters: dict[Hashable, str] = {}
    for x in labels:
        if x not in letters:
            if len(letters) == len(LETTERS):
                raise error_for(
                    ErrorCode.UNSUPPORTED,
                    f"{what} takes at most {len(LETTERS)} distinct labels; split the product "
                    "or use the blas or reference backend",
                )
            letters[x] = LETTERS[len(letters)]
    return letters


def words(groups: Sequence[Sequence[Hashable]], what: str = "this product") -> tuple[str, ...]:
    """Each group of labels as a word of letters, one letter per distinct label overall.

    Raises
    ------
    UnsupportedError
        Code 18 when the groups hold more than 52 distinct labels.

    Examples
    --------
    >>> words([(0, 1), (1, 2), ()])
    ('ab', 'bc', '')
    """
    letters = letter_map((x for group in groups for x in group), what)
    return tuple("".join(letters[x] for x in group) for group in groups)


def einsum_text(inputs: Sequence[Sequence[Hashable]], output: Sequence[Hashable]) -> str:
    """Return an einsum-like rendering for messages.

    Labels as written when each is one character, otherwise letters (or, past 52 labels, the
    labels' reprs).

    Examples
    --------
    >>> einsum_text(["ik", "kj"], "ij")
    'ik,kj->ij'
    >>> einsum_text([(("x", 0), 1)], (1,))
    'ab->b'
    """
    groups = [*inputs, output]
    try:
        if all(isinstance(x, str) and len(x) == 1 for g in groups for x in g):
            texts: Sequence[str] = ["".join(map(str, g)) for g in groups]
        else:
            texts = words(groups)
    except TappError:
        texts = [repr(tuple(g)) for g in groups]
    return ",".join(texts[:-1]) + "->" + texts[-1]
