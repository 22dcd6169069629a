"""Every error code of SPEC section 5 is produced, with the right class, and D is unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import Attr, ElementOp, ErrorCode, Executor, Handle, TensorInfo, TensorProduct

F64 = pytapp.Datatype.F64


def info(x: np.ndarray) -> TensorInfo:
    return TensorInfo.from_array(x)


class Setup:
    """A valid product D[i,j] = A[i,k] B[k,j] (+ C), with a canary-filled D allocation."""

    def __init__(self, backend: str) -> None:
        rng = np.random.default_rng(7)
        self.handle = Handle(backend)
        self.a = rng.standard_normal((3, 4))
        self.b = rng.standard_normal((4, 5))
        self.c = rng.standard_normal((3, 5))
        self.d_parent = np.full(3 * 5 + 4, 1234.5)
        self.d = self.d_parent[2:17].reshape(3, 5)
        self.before = self.d_parent.copy()

    def plan(self, **kw: Any) -> TensorProduct:
        args: dict[str, Any] = dict(
            a=info(self.a), a_labels="ik", b=info(self.b), b_labels="kj",
            c=info(self.c), c_labels="ij", d=info(self.d), d_labels="ij",
        )
        args.update(kw)
        extra = {k: args.pop(k) for k in list(args) if k.startswith("op_") or k in (
            "prec", "allow_broadcast")}
        return TensorProduct(
            self.handle, args["a"], args["a_labels"], args["b"], args["b_labels"],
            args["c"], args["c_labels"], args["d"], args["d_labels"], **extra,
        )

    def run(self, plan: TensorProduct | None = None, **kw: Any) -> pytapp.Status:
        p = plan or self.plan()
        args: dict[str, Any] = dict(alpha=1.0, a=self.a, b=self.b, beta=1.0, c=self.c, d=self.d)
        args.update(kw)
        return p.execute(args["alpha"], args["a"], args["b"], args["beta"], args["c"],
                         args["d"], args.get("executor"))


SCENARIOS: dict[int, Callable[[Setup], Any]] = {
    1: lambda s: s.plan(b=TensorInfo(F64, (5, 5)), b_labels="kj"),
    2: lambda s: s.plan(d=TensorInfo(F64, (4, 5)), c=TensorInfo(F64, (4, 5))),
    3: lambda s: s.plan(d=TensorInfo(F64, (3, 6)), c=TensorInfo(F64, (3, 6))),
    4: lambda s: s.plan(d_labels="iz", c_labels="iz"),
    5: lambda s: s.plan(c=TensorInfo(F64, (3, 5, 1)), c_labels="ijx"),
    6: lambda s: s.plan(c=TensorInfo(F64, (5, 3)), c_labels="ji"),
    7: lambda s: s.plan(c=TensorInfo(F64, (3, 6))),
    8: lambda s: s.plan(d=TensorInfo(F64, (3, 5), (1, 1))),
    9: lambda s: s.plan(a=TensorInfo(F64, (3, 4, 4)), a_labels="iki"),
    10: lambda s: s.plan(b=TensorInfo(F64, (4, 5, 3)), b_labels="kjj"),
    11: lambda s: s.plan(d=TensorInfo(F64, (3, 5, 2, 3)), d_labels="ijzz",
                         c=TensorInfo(F64, (3, 5, 2, 3)), c_labels="ijzz",
                         allow_broadcast=True),
    12: lambda s: s.run(c=None, beta=1.0),
    13: lambda s: s.plan(a_labels="ikx"),
    14: lambda s: TensorInfo(F64, (3, -1)),
    15: lambda s: TensorInfo(17, (3,)),
    16: lambda s: s.plan(prec=42),
    17: lambda s: s.plan(op_a=ElementOp.CONJUGATE + 5),
    18: lambda s: Handle("no-such-backend"),
    19: lambda s: s.run(d=s.d_parent[15:]),  # flat storage too short for D's layout
    20: lambda s: s.run(a=s.a.astype(np.float32)),
    21: lambda s: s.run(alpha=1 + 2j),
    22: lambda s: s.run(d=np.frombuffer(s.d.tobytes()).reshape(3, 5)),
    23: lambda s: (lambda p: (p.destroy(), s.run(p)))(s.plan()),
    24: lambda s: s.run(executor=Executor(Handle(s.handle.backend_name))),
    25: lambda s: s.plan().execute_batched(1.0, [s.a, s.a], [s.b], 0.0, None, [s.d]),
    26: lambda s: s.plan().get_attr(Attr.NUM_THREADS),
    33: lambda s: s.run(executor="cpu"),
}

CLASSES = {
    1: pytapp.ExtentMismatchError, 4: pytapp.LabelError, 5: pytapp.StructureMismatchError,
    8: pytapp.AliasingError, 12: pytapp.MissingOperandError, 14: pytapp.InvalidDescriptorError,
    16: pytapp.PrecisionError, 17: pytapp.ElementOpError, 18: pytapp.UnsupportedError,
    19: pytapp.OutOfBoundsError, 20: pytapp.OperandMismatchError, 21: pytapp.ScalarError,
    22: pytapp.ReadOnlyError, 23: pytapp.DestroyedError, 24: pytapp.HandleMismatchError,
    25: pytapp.BatchLengthError, 26: pytapp.AttributeKeyError, 33: pytapp.ExecutorError,
}


def test_every_spec_code_has_a_scenario() -> None:
    spec_codes = {int(c) for c in ErrorCode} - {0, 137}
    assert spec_codes <= set(SCENARIOS)


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_error_code_and_d_unchanged(backend: str, code: int) -> None:
    s = Setup(backend)
    with pytest.raises(pytapp.TappError) as err:
        SCENARIOS[code](s)
    assert err.value.code == code, str(err.value)
    assert s.d_parent.tobytes() == s.before.tobytes()
    if code in CLASSES:
        assert isinstance(err.value, CLASSES[code])
    assert pytapp.explain_error(code) in str(err.value)


def test_errors_subclass_builtins() -> None:
    assert issubclass(pytapp.UnsupportedError, NotImplementedError)
    assert issubclass(pytapp.OperandMismatchError, TypeError)
    assert issubclass(pytapp.ExtentMismatchError, ValueError)


def test_explain_and_check_success() -> None:
    for code in ErrorCode:
        assert pytapp.explain_error(code)
    assert pytapp.explain_error(4242) == "unknown error code 4242"
    assert pytapp.check_success(0) and not pytapp.check_success(8)


def test_valid_setup_succeeds_and_matches_einsum(backend: str) -> None:
    s = Setup(backend)
    s.run()
    np.testing.assert_allclose(s.d, s.a @ s.b + s.c, rtol=1e-12, atol=1e-12)
    assert np.all(s.d_parent[:2] == 1234.5) and np.all(s.d_parent[17:] == 1234.5)
