"""Conformance fixtures as data: the kit's seeded instances written for any implementation.

``pytapp check --export DIR`` writes one JSON file per instance plus raw binary data files,
and an ``index.json``; ``pytapp check --fixtures DIR`` replays them against a pytapp backend or
a C library. The format (name ``tapp-fixture``, :data:`VERSION`) is documented in
``docs/fixtures.md``: descriptors, labels (int64), element ops, precision, alpha and beta,
every operand's whole allocation as little-endian bytes with the offset and strides of its
element [0, ..., 0], and the expectation: the result with its per-element error bound and
tolerance, or the error the product must raise.

Examples
--------
>>> import tempfile
>>> out = tempfile.mkdtemp()
>>> index = export(out, cases=[2], seeds=1)
>>> [f["file"] for f in index["fixtures"]]
['case02-seed000.json']
>>> inst, expected = load(f"{out}/case02-seed000.json")
>>> inst.case, expected is not None
(2, True)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from pytapp.conformance.cases import CASES
from pytapp.conformance.instance import Instance, OperandData, Operands
from pytapp.conformance.oracle import Expected, expected_result
from pytapp.datatypes import Datatype, ElementOp
from pytapp.precision import Prectype

__all__ = ["FORMAT", "VERSION", "CorruptFixture", "export", "exportable", "load"]

#: Format name and version written into every fixture and the index.
FORMAT, VERSION = "tapp-fixture", 1


class CorruptFixture(ValueError):
    """A fixture file that cannot be read or whose data does not match its checksums."""


def exportable(inst: Instance) -> str:
    """Return why ``inst`` cannot be written as data ("" when it can).

    Misuse scenarios (a destroyed plan, a foreign handle) are actions, not data; batched
    products and operands sharing an allocation (C is D, D overlapping A) are left out of
    version 1.
    """
    if inst.scenario:
        return f"scenario {inst.scenario!r} is an action, not data"
    if inst.batched:
        return "batched products are not in format version 1"
    item = inst.items[0]
    present = [(r, x) for r, x in item.roles().items() if x is not None]
    if len({id(x.parent) for _, x in present}) != len(present):
        return "operands share an allocation (not in format version 1)"
    for role, x in present:
        if not _inside(x):
            return f"{role}'s layout reaches outside its allocation (a reader could not map it)"
    return ""


def _inside(data: OperandData) -> bool:
    """Whether every element the view addresses lies inside its parent allocation."""
    view = np.asarray(data.view)
    if view.size == 0:
        return True
    item = view.itemsize
    low = high = data.offset_bytes
    for extent, stride in zip(view.shape, view.strides, strict=True):
        reach = (extent - 1) * stride
        low, high = low + min(reach, 0), high + max(reach, 0)
    return low >= 0 and high + item <= data.parent.nbytes


def _scalar(value: complex | float) -> list[float]:
    c = complex(value)
    return [c.real, c.imag]


def _write(directory: str, name: str, array: np.ndarray) -> dict[str, Any]:
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">":
        data = data.byteswap().view(data.dtype.newbyteorder("<"))
    raw = data.tobytes()
    with open(os.path.join(directory, name), "wb") as fh:
        fh.write(raw)
    return {"file": name, "sha256": hashlib.sha256(raw).hexdigest()}


def _operand(directory: str, stem: str, role: str, data: OperandData,
             labels: Sequence[int], datatype: Datatype, op: ElementOp) -> dict[str, Any]:
    view = np.asarray(data.view)
    item = datatype.itemsize
    record = {
        "datatype": int(datatype), "op": int(op), "labels": list(labels),
        "extents": list(view.shape), "strides": [s // item for s in view.strides],
        "offset": data.offset_bytes // item, "elements": int(data.parent.size),
    }
    record.update(_write(directory, f"{stem}-{role}.bin", data.parent))
    return record


def _fixture(directory: str, inst: Instance) -> dict[str, Any]:
    stem = f"case{inst.case:02d}-seed{inst.seed:03d}"
    ids: dict[Hashable, int] = {}
    for role in "ABCD":
        for x in inst.labels[role]:
            ids.setdefault(x, len(ids))
    item = inst.items[0]
    operands: dict[str, Any] = {}
    for role, data in item.roles().items():
        operands[role] = None if data is None else _operand(
            directory, stem, role, data, [ids[x] for x in inst.labels[role]],
            inst.datatypes[role], inst.ops.get(role, ElementOp.IDENTITY))
    expect: dict[str, Any]
    if inst.expected_code is not None:
        expect = {"outcome": "error", "code": int(inst.expected_code)}
    else:
        exp = expected_result(inst, item)
        expect = {"outcome": "success", "tol": exp.tol, "store_eps": exp.store_eps,
                  "store_tiny": exp.store_tiny,
                  "result": _write(directory, f"{stem}-D.expected.bin", exp.parent),
                  "bound": _write(directory, f"{stem}-D.bound.bin", exp.bound),
                  "written": _write(directory, f"{stem}-D.written.bin",
                                    exp.written.astype(np.uint8))}
    return {
        "format": FORMAT, "version": VERSION, "case": inst.case, "seed": inst.seed,
        "name": CASES[inst.case].name, "description": inst.describe(),
        "prec": int(inst.prec), "alpha": _scalar(inst.alpha), "beta": _scalar(inst.beta),
        "allow_broadcast": inst.allow_broadcast, "operands": operands, "expect": expect,
    }


def export(directory: str, cases: Sequence[int] | None = None, seeds: int = 20) -> dict[str, Any]:
    """Write the kit's instances of ``cases`` (default all), ``seeds`` each, into ``directory``.

    Returns the index (also written as ``index.json``): the fixtures written and the
    instances left out, each with the reason.
    """
    os.makedirs(directory, exist_ok=True)
    written: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for number in cases or sorted(CASES):
        for seed in range(seeds):
            inst = CASES[number].make(seed)
            why = exportable(inst)
            if why:
                skipped.append({"case": number, "seed": seed, "reason": why})
                continue
            record = _fixture(directory, inst)
            name = f"case{number:02d}-seed{seed:03d}.json"
            with open(os.path.join(directory, name), "w", encoding="utf-8") as fh:
                json.dump(record, fh, indent=1)
            written.append({"file": name, "case": number, "seed": seed,
                            "outcome": record["expect"]["outcome"]})
    index = {"format": FORMAT, "version": VERSION, "fixtures": written, "skipped": skipped}
    with open(os.path.join(directory, "index.json"), "w", encoding="utf-8") as fh:
        json.dump(index, fh, indent=1)
    return index


def _read(directory: str, ref: dict[str, Any], dtype: Any, count: int) -> np.ndarray:
    path = os.path.join(directory, str(ref["file"]))
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise CorruptFixture(f"cannot read {ref['file']}: {exc}") from exc
    if hashlib.sha256(raw).hexdigest() != ref.get("sha256"):
        raise CorruptFixture(f"{ref['file']} does not match its sha256 checksum")
    data = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
    if data.size != count:
        raise CorruptFixture(f"{ref['file']} holds {data.size} elements, not {count}")
    return data.astype(np.dtype(dtype))  # a writable copy in native order


def _view(parent: np.ndarray, record: dict[str, Any]) -> np.ndarray:
    item = parent.itemsize
    try:
        return np.ndarray(tuple(record["extents"]), parent.dtype, buffer=parent,
                          offset=int(record["offset"]) * item,
                          strides=tuple(int(s) * item for s in record["strides"]))
    except (TypeError, ValueError) as exc:
        raise CorruptFixture(f"layout outside its data: {exc}") from exc


def load(path: str) -> tuple[Instance, Expected | None]:
    """Read one fixture: the instance to run and, for a product that must succeed, its expectation.

    Raises
    ------
    CorruptFixture
        When the file is not a readable fixture of a known version, or its data does not
        match its checksums or its layouts.
    """
    directory = os.path.dirname(path)
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
        if record.get("format") != FORMAT or record.get("version") != VERSION:
            raise CorruptFixture(f"not a {FORMAT} version {VERSION} file")
        roles: dict[str, OperandData | None] = {}
        datatypes: dict[str, Datatype] = {}
        labels: dict[str, tuple[Hashable, ...]] = {}
        ops: dict[str, ElementOp] = {}
        d_record = record["operands"]["D"]
        for role in "ABCD":
            op = record["operands"][role] or (d_record if role == "C" else None)
            if op is None:
                raise CorruptFixture(f"operand {role} is missing")
            datatypes[role] = Datatype(int(op["datatype"]))
            labels[role] = tuple(int(x) for x in op["labels"])
            ops[role] = ElementOp(int(op["op"]))
            if record["operands"][role] is None:
                roles[role] = None
                continue
            parent = _read(directory, op, datatypes[role].numpy_dtype, int(op["elements"]))
            roles[role] = OperandData(_view(parent, op), parent)
        d_type = datatypes["D"]
        alpha, beta = (complex(*record[k]) for k in ("alpha", "beta"))
        expect = record["expect"]
        inst = Instance(
            case=int(record["case"]), seed=int(record["seed"]), labels=labels,
            datatypes=datatypes, items=[Operands(*(roles[r] for r in "ABCD"))],  # type: ignore[arg-type]
            ops=ops, prec=Prectype(int(record["prec"])),
            alpha=alpha if d_type.is_complex else alpha.real,
            beta=beta if d_type.is_complex else beta.real,
            allow_broadcast=bool(record.get("allow_broadcast", False)),
            expected_code=int(expect["code"]) if expect["outcome"] == "error" else None)
        if expect["outcome"] == "error":
            return inst, None
        d_parent = roles["D"].parent  # type: ignore[union-attr]
        size = d_parent.size
        expected = Expected(
            parent=_read(directory, expect["result"], np.complex128, size).reshape(
                d_parent.shape),
            bound=_read(directory, expect["bound"], np.float64, size).reshape(d_parent.shape),
            written=_read(directory, expect["written"], np.uint8, size).reshape(
                d_parent.shape).astype(bool),
            original=d_parent.copy(), tol=float(expect["tol"]),
            store_eps=float(expect["store_eps"]), store_tiny=float(expect["store_tiny"]))
        return inst, expected
    except CorruptFixture:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptFixture(f"{os.path.basename(path)}: {type(exc).__name__}: {exc}") from exc
