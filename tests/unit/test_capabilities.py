"""Capabilities.unsupported_reason: each restriction is reported for the layouts it forbids.

The check reads a spec's layout traits (computed once per spec) before it looks at any
operand; these tests build specs with and without each feature and compare with what the
layouts plainly contain.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytapp.analysis.spec import ContractionSpec, build_spec
from pytapp.backends.base import Capabilities
from pytapp.datatypes import Datatype
from pytapp.precision import Prectype

F64, F32 = Datatype.F64, Datatype.F32


def _spec(a_strides: Sequence[int] = (3, 1), a_labels: str = "ik", a_ext: Sequence[int] = (2, 3),
          dt_b: Datatype = F64) -> ContractionSpec:
    b = (dt_b, (3, 4), (4, 1), "kj", 0)
    d = (F64, (2, 4), (4, 1), "ij", 0)
    return build_spec((F64, tuple(a_ext), tuple(a_strides), a_labels, 0), b, d, d,
                      Prectype.DEFAULT)


@pytest.mark.parametrize(("strides", "ext", "flag", "word"), [
    ((-3, 1), (2, 3), "negative_strides", "negative"),
    ((0, 1), (2, 3), "zero_strides", "zero"),
    ((3, -1), (2, 3), "negative_strides", "negative"),
])
def test_forbidden_layouts_are_named(strides: tuple[int, int], ext: tuple[int, int],
                                     flag: str, word: str) -> None:
    spec = _spec(strides, a_ext=ext)
    assert Capabilities().unsupported_reason(spec) is None
    reason = Capabilities(**{flag: False}).unsupported_reason(spec)  # type: ignore[arg-type]
    assert reason is not None and word in reason and "A" in reason


def test_zero_stride_of_extent_one_is_no_broadcast() -> None:
    d = (F64, (1, 4), (4, 1), "ij", 0)
    spec = build_spec((F64, (1, 3), (0, 1), "ik", 0), (F64, (3, 4), (4, 1), "kj", 0), d, d,
                      Prectype.DEFAULT)
    assert spec.traits.zero is False
    assert Capabilities(zero_strides=False).unsupported_reason(spec) is None


def test_plain_layouts_pass_every_restriction() -> None:
    spec = _spec()
    caps = Capabilities(negative_strides=False, zero_strides=False, repeated_labels=False,
                        max_modes=2, mixed_datatypes=False)
    assert caps.unsupported_reason(spec) is None


def test_repeated_labels_and_mode_limit() -> None:
    d = (F64, (3,), (1,), "i", 0)
    spec = build_spec((F64, (3, 3), (3, 1), "ii", 0), (F64, (3,), (1,), "i", 0), d, d,
                      Prectype.DEFAULT)
    assert spec.traits.repeated and spec.traits.most_modes == 1
    assert "repeated" in str(Capabilities(repeated_labels=False).unsupported_reason(spec))
    wide = _spec()
    assert "modes" in str(Capabilities(max_modes=1).unsupported_reason(wide))


def test_datatypes() -> None:
    mixed = _spec(dt_b=F32)
    assert Capabilities().unsupported_reason(mixed) is None
    assert "mixed" in str(Capabilities(mixed_datatypes=False).unsupported_reason(mixed))
    only32 = Capabilities(datatypes=frozenset({F32}))
    assert "F64" in str(only32.unsupported_reason(mixed))
