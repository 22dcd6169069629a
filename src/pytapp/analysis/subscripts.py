"""numpy.einsum subscripts: parsing, ellipsis expansion and the sublist (interleaved) form.

Pure: strings and integers in, an :class:`Equation` out. Every label of an equation is one
character; the dimensions an ellipsis stands for get characters that no user label can be
(``chr(0xE000 + k)``, Unicode private use), so a parsed equation is unambiguous whatever the
user wrote. Labels are letters: ASCII as in NumPy, or any other alphabetic character as in
opt_einsum.

Examples
--------
>>> eq = parse_subscripts("...ij,jk", (3, 2))
>>> str(eq).replace(ellipsis_symbol(0), "...")
'...ij,jk->...ik'
>>> eq.letter_map()[ellipsis_symbol(0)]
'a'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytapp.analysis.letters import LETTERS
from pytapp.errors import ErrorCode, TappError, error_for

__all__ = ["Equation", "ellipsis_symbol", "from_sublists", "parse_subscripts"]

_ELLIPSIS_BASE = 0xE000  # Unicode private use: never a letter

def ellipsis_symbol(k: int) -> str:
    """Return the label of the ``k``-th broadcast dimension (counted from the left)."""
    return chr(_ELLIPSIS_BASE + k)


def _is_user_label(ch: str) -> bool:
    return ch.isalpha()


@dataclass(frozen=True)
class Equation:
    """A parsed einsum: one label string per operand and the output's labels."""

    inputs: tuple[str, ...]
    output: str

    def __str__(self) -> str:
        return ",".join(self.inputs) + "->" + self.output

    def letter_map(self) -> dict[str, str]:
        """Return every label's letter for NumPy: ASCII letters stay, others get unused ones.

        Raises
        ------
        InvalidDescriptorError
            Code 13 when the equation has more than 52 labels.

        Examples
        --------
        >>> m = Equation((ellipsis_symbol(0) * 2, ellipsis_symbol(0) + "b"), "b").letter_map()
        >>> m[ellipsis_symbol(0)], m["b"]
        ('a', 'b')
        """
        used = set(self.labels)
        free = iter(ch for ch in LETTERS if ch not in used)
        rename = {}
        for ch in self.labels:
            if ch in LETTERS:
                rename[ch] = ch
                continue
            found = next(free, None)
            if found is None:
                raise error_for(ErrorCode.NEGATIVE_NMODES,
                                f"{len(used)} labels do not fit in 52 letters")
            rename[ch] = found
        return rename

    @property
    def labels(self) -> str:
        """Every label, in order of first appearance."""
        seen: dict[str, None] = {}
        for term in (*self.inputs, self.output):
            seen.update(dict.fromkeys(term))
        return "".join(seen)


def _malformed(subscripts: str, position: int, what: str) -> TappError:
    pointer = " " * (position + 1) + "^"
    return error_for(
        ErrorCode.NEGATIVE_NMODES,
        f"malformed einsum subscripts at position {position}: {what}\n  {subscripts!r}\n"
        f"  {pointer}\nwrite comma-separated terms of letters, with an optional '...' per term "
        "and an optional '->' output, like 'ij,jk->ik' or '...ij,...jk'",
    )


def _split_terms(subscripts: str) -> tuple[list[tuple[int, str]], tuple[int, str] | None]:
    """Split into (start position, text) per input term and the output term (or None)."""
    arrow = subscripts.find("->")
    if arrow >= 0 and subscripts.find("->", arrow + 2) >= 0:
        second = subscripts.find("->", arrow + 2)
        raise _malformed(subscripts, second, f"a second '->' (the first is at position {arrow})")
    head = subscripts if arrow < 0 else subscripts[:arrow]
    terms: list[tuple[int, str]] = []
    start = 0
    for part in head.split(","):
        terms.append((start, part))
        start += len(part) + 1
    output = None if arrow < 0 else (arrow + 2, subscripts[arrow + 2:])
    if output is not None and "," in output[1]:
        raise _malformed(subscripts, output[0] + output[1].index(","),
                         "the output after '->' is one term: no ','")
    return terms, output


def _scan_term(subscripts: str, start: int, text: str) -> tuple[str, int]:
    """Labels of one term with '.' for the ellipsis, and the ellipsis position (-1 if none)."""
    labels: list[str] = []
    ellipsis_at = -1
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == ".":
            if text[i:i + 3] != "...":
                raise _malformed(subscripts, start + i, "'.' is only allowed as '...'")
            if ellipsis_at >= 0:
                raise _malformed(subscripts, start + i, "a second '...' in one term")
            ellipsis_at = len(labels)
            i += 3
            continue
        if ch in "->":
            raise _malformed(subscripts, start + i, "'-' and '>' only appear together as '->'")
        if not _is_user_label(ch):
            raise _malformed(subscripts, start + i, f"{ch!r} is not a label; labels are "
                                                    "letters (a-z, A-Z or other alphabets)")
        labels.append(ch)
        i += 1
    return "".join(labels), ellipsis_at


def parse_subscripts(subscripts: str, ndims: Sequence[int]) -> Equation:
    """Parse numpy.einsum subscripts for operands with ``ndims`` modes each.

    Ellipses are expanded (right-aligned, as NumPy broadcasts); without ``->`` the output is
    the broadcast dimensions followed by the labels that appear exactly once, sorted.

    Raises
    ------
    InvalidDescriptorError
        Code 13: malformed subscripts (the message points at the position), a term whose
        label count does not match its operand's modes, or ``...`` missing from an explicit
        output while the inputs broadcast dimensions.
    LabelError
        Code 4: an output label that no input has; code 13 for a label repeated in the output.

    Examples
    --------
    >>> str(parse_subscripts("ii", (2,)))
    'ii->'
    """
    if not isinstance(subscripts, str):
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"subscripts must be a string like 'ij,jk->ik', not "
                        f"{type(subscripts).__name__}", also=TypeError)
    terms, output = _split_terms(subscripts)
    if len(terms) != len(ndims):
        raise error_for(
            ErrorCode.NEGATIVE_NMODES,
            f"the subscripts {subscripts!r} have {len(terms)} input terms but {len(ndims)} "
            "operands were given; give one term per operand",
        )
    scanned = [_scan_term(subscripts, start, text) for start, text in terms]
    widths: list[int] = []
    for index, ((labels, at), ndim) in enumerate(zip(scanned, ndims, strict=True)):
        extra = ndim - len(labels)
        if extra < 0 or (extra > 0 and at < 0):
            raise error_for(
                ErrorCode.NEGATIVE_NMODES,
                f"operand {index} has {ndim} modes but its term {terms[index][1].strip()!r} "
                f"names {len(labels)}; give one label per mode (or '...' for the rest)",
            )
        widths.append(extra)
    width = max(widths, default=0)
    broadcast = "".join(ellipsis_symbol(k) for k in range(width))
    inputs = []
    for (labels, at), extra in zip(scanned, widths, strict=True):
        if at < 0:
            inputs.append(labels)
        else:
            inputs.append(labels[:at] + broadcast[width - extra:] + labels[at:])
    uses_ellipsis = any(at >= 0 for _, at in scanned)
    if output is None:
        counts: dict[str, int] = {}
        for labels, _ in scanned:
            for ch in labels:
                counts[ch] = counts.get(ch, 0) + 1
        out = broadcast + "".join(sorted(ch for ch, n in counts.items() if n == 1))
        return Equation(tuple(inputs), out)
    out_labels, out_at = _scan_term(subscripts, output[0], output[1])
    if out_at < 0 and width > 0 and uses_ellipsis:
        raise _malformed(subscripts, output[0], "the inputs broadcast dimensions through '...' "
                                                "but the output has no '...'; add it")
    out = out_labels if out_at < 0 else out_labels[:out_at] + broadcast + out_labels[out_at:]
    known = set("".join(inputs))
    for i, ch in enumerate(out_labels):
        if ch not in known:
            raise error_for(ErrorCode.LABEL_NOT_IN_INPUTS,
                            f"output label {ch!r} is in no input term of {subscripts!r}; every "
                            "output label must come from an input")
        if ch in out_labels[:i]:
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"output label {ch!r} appears twice in {subscripts!r}; an output "
                            "label appears once")
    return Equation(tuple(inputs), out)


def _sublist_label(item: Any, where: str) -> str:
    if item is Ellipsis:
        return "..."
    if isinstance(item, bool) or not hasattr(item, "__index__"):
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"{where} holds {item!r}; sublists hold integers 0-51 or Ellipsis",
                        also=TypeError)
    try:
        k = int(item)
    except (TypeError, ValueError) as exc:  # an array of several elements, say
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"{where} holds {item!r}; sublists hold integers 0-51 or Ellipsis",
                        also=TypeError) from exc
    if not 0 <= k < 52:
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"{where} holds {k}; sublist labels are integers from 0 to 51")
    return chr(ord("A") + k) if k < 26 else chr(ord("a") + k - 26)


def from_sublists(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """Turn ``(op0, sub0, op1, sub1, ..., [out])`` into subscripts and the operand list.

    Integers 0-25 become ``A``-``Z`` and 26-51 ``a``-``z``, as in NumPy.

    Examples
    --------
    >>> from_sublists(["x", [0, 1], "y", [1], [0]])
    ('AB,B->A', ['x', 'y'])
    """
    items = list(args)
    operands = items[0::2][: len(items) // 2]
    subs = items[1::2][: len(items) // 2]
    out = items[-1] if len(items) % 2 == 1 else None
    terms = []
    for i, sub in enumerate(subs):
        if isinstance(sub, (str, bytes)) or not hasattr(sub, "__iter__"):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"the sublist of operand {i} is {sub!r}; give a list of integers "
                            "(or write the subscripts as a string like 'ij,jk->ik')",
                            also=TypeError)
        terms.append("".join(_sublist_label(x, f"the sublist of operand {i}") for x in sub))
    subscripts = ",".join(terms)
    if out is not None:
        if isinstance(out, (str, bytes)) or not hasattr(out, "__iter__"):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"the output sublist is {out!r}; give a list of integers",
                            also=TypeError)
        subscripts += "->" + "".join(_sublist_label(x, "the output sublist") for x in out)
    return subscripts, operands
