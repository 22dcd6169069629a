"""Benchmark cases: the public set (JSON data), seeded random generators per domain, suites.

Examples
--------
>>> cases = suite("quick")
>>> all(c.flops > 0 for c in cases)
True
>>> generate("tensor networks", seed=1, size=0.5).domain
'tensor networks'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources
from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.cost import least_flops
from pytapp.analysis.letters import LETTERS
from pytapp.datatypes import Datatype

__all__ = ["DOMAINS", "BenchCase", "generate", "load_public", "random_case", "small_family",
           "suite"]

DOMAINS = (
    "quantum chemistry", "tensor networks", "machine learning", "tensor decomposition",
    "elementwise/outer", "reduction",
)


@dataclass(frozen=True)
class BenchCase:
    """One binary contraction to time: ``einsum`` labels, extents per label, datatype."""

    name: str
    domain: str
    einsum: str
    extents: dict[str, int] = field(hash=False)
    dtype: str = "f64"
    note: str = ""

    @property
    def labels(self) -> tuple[str, str, str]:
        """Labels of A, B and D."""
        inputs, _, out = self.einsum.partition("->")
        a, b = inputs.split(",")
        return a, b, out

    @property
    def datatype(self) -> Datatype:
        """The TAPP datatype of every operand."""
        return Datatype.from_name(self.dtype)

    def shape(self, labels: str) -> tuple[int, ...]:
        """Extents of the given labels."""
        return tuple(self.extents[x] for x in labels)

    @property
    def flops(self) -> int:
        """Least floating-point work of ``alpha A B + beta C``.

        Isolated labels summed first (one add per element), then 2 per multiply-add over the
        other distinct labels (8 for complex), then the epilogue (3 per element of D).
        """
        return least_flops(self.labels, self.extents, self.datatype.is_complex)

    @property
    def bytes_moved(self) -> int:
        """Bytes of the distinct elements of A, B, C and D (a repeated label reads a diagonal).

        The least memory traffic of one operation.
        """
        a, b, d = self.labels
        return self.datatype.itemsize * sum(
            prod(self.extents[x] for x in set(lab)) for lab in (a, b, d, d))

    def scaled(self, size: float) -> BenchCase:
        """Every extent multiplied by ``size`` (at least 1), for machines of other sizes."""
        if size == 1:
            return self
        ext = {k: max(1, round(v * size)) for k, v in self.extents.items()}
        return replace(self, extents=ext, name=f"{self.name}@{size:g}")

    def arrays(self, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Fresh random A, B and C (never zeros) and a D to write into, row-major."""
        rng = np.random.default_rng(seed)
        dtype = self.datatype.numpy_dtype
        la, lb, ld = self.labels

        def rand(shape: tuple[int, ...]) -> np.ndarray:
            x = rng.uniform(-1.0, 1.0, size=shape)
            if self.datatype.is_complex:
                x = x + 1j * rng.uniform(-1.0, 1.0, size=shape)
            return np.array(x, dtype=dtype, order="C")  # 0-d stays 0-d

        return (rand(self.shape(la)), rand(self.shape(lb)), rand(self.shape(ld)),
                np.zeros(self.shape(ld), dtype))

    def to_json(self) -> dict[str, Any]:
        """Return the case as the JSON record it was read from."""
        return {"name": self.name, "domain": self.domain, "einsum": self.einsum,
                "extents": dict(self.extents), "dtype": self.dtype, "note": self.note}


def load_public() -> list[BenchCase]:
    """Return the public benchmark cases shipped with pytapp."""
    text = resources.files("pytapp.bench").joinpath("cases.json").read_text()
    return [BenchCase(**record) for record in json.loads(text)["cases"]]


_TEMPLATES: dict[str, list[tuple[str, dict[str, int]]]] = {
    "quantum chemistry": [
        ("abcd,cdij->abij", {"a": 48, "b": 48, "c": 48, "d": 48, "i": 16, "j": 16}),
        ("akic,bjkc->abij", {"a": 48, "b": 48, "c": 48, "i": 16, "j": 16, "k": 16}),
        ("abij,kjcb->akic", {"a": 40, "b": 40, "c": 40, "i": 12, "j": 12, "k": 12}),
    ],
    "tensor networks": [
        ("amb,asc->mbsc", {"a": 256, "b": 256, "c": 256, "m": 6, "s": 4}),
        ("abuU,bclL->auUclL", {"a": 48, "b": 48, "c": 48, "u": 5, "U": 5, "l": 5, "L": 5}),
    ],
    "machine learning": [
        ("bhqd,bhkd->bhqk", {"b": 4, "h": 8, "q": 256, "k": 256, "d": 64}),
        ("bsi,oi->bso", {"b": 8, "s": 128, "i": 512, "o": 512}),
    ],
    "tensor decomposition": [("pjk,ip->ijk", {"i": 160, "j": 160, "k": 160, "p": 48})],
    "elementwise/outer": [("ab,cd->acbd", {"a": 48, "b": 48, "c": 48, "d": 48})],
    "reduction": [("abcd,abcd->", {"a": 48, "b": 48, "c": 48, "d": 48})],
}


def generate(domain: str, seed: int, size: float = 1.0, dtype: str | None = None) -> BenchCase:
    """Return a randomized case of ``domain``: a template of that domain with jittered extents.

    ``seed`` picks the template and jitters each extent by up to +-25 %; ``size`` scales
    all extents so that a case fits the machine at hand.
    """
    if domain not in _TEMPLATES:
        raise ValueError(f"unknown domain {domain!r}; choose one of {', '.join(_TEMPLATES)}")
    rng = np.random.default_rng(seed)
    templates = _TEMPLATES[domain]
    expr, extents = templates[int(rng.integers(0, len(templates)))]
    ext = {k: max(1, round(v * size * float(rng.uniform(0.75, 1.25)))) for k, v in
           extents.items()}
    chosen = dtype or str(rng.choice(["f64", "f32", "c128", "c64"]))
    slug = domain.split()[0].split("/")[0]
    return BenchCase(f"gen_{slug}_{seed}", domain, expr, ext, chosen, "randomized")


#: Datatypes of random cases and how often each is drawn.
_RANDOM_DTYPES = (("f64", 0.35), ("f32", 0.3), ("c128", 0.15), ("c64", 0.12), ("bf16", 0.08))
#: Most elements of one operand of a random case.
_RANDOM_MAX_ELEMENTS = 1 << 24


def random_case(seed: int, size: float = 1.0) -> BenchCase:
    """Return a seeded random product, as the TAPP paper plans its randomized benchmarks.

    Random label classes (0-1 Hadamard, 1-3 free of A, 0-3 free of B, 1-3 contracted, and
    sometimes an isolated label of A), random mode orders in A, B and D, a random datatype,
    and extents drawn so that the product has 0.2-3 GFLOP (times ``size``), with no operand
    above 16M elements: 10-200 ms on a small machine.
    """
    rng = np.random.default_rng(seed)
    counts = {"H": int(rng.integers(0, 2)), "FA": int(rng.integers(1, 4)),
              "FB": int(rng.integers(0, 4)), "P": int(rng.integers(1, 4)),
              "IA": int(rng.random() < 0.2)}
    pool = list(LETTERS[:26])  # lowercase only
    rng.shuffle(pool)
    cls = {k: [pool.pop() for _ in range(n)] for k, n in counts.items()}
    names = [x for k in cls for x in cls[k]]
    dtypes = [name for name, _ in _RANDOM_DTYPES]
    dtype = str(rng.choice(dtypes, p=[w for _, w in _RANDOM_DTYPES]))
    target = 10 ** rng.uniform(8.3, 9.5) * size / (4 if dtype.startswith("c") else 1)
    share = rng.uniform(0.5, 1.5, len(names))
    logs = np.log(target / 2) * share / share.sum()
    ext = {x: int(min(4096, max(2, round(np.exp(v))))) for x, v in zip(names, logs, strict=True)}
    a = cls["H"] + cls["FA"] + cls["P"] + cls["IA"]
    b = cls["H"] + cls["FB"] + cls["P"]
    d = cls["H"] + cls["FA"] + cls["FB"]
    for labels in (a, b, d):  # keep every operand within bounds: shrink its largest extents
        while prod(ext[x] for x in labels) > _RANDOM_MAX_ELEMENTS:
            big = max(labels, key=lambda x: ext[x])
            ext[big] = max(2, ext[big] // 2)
    words = ["".join(rng.permutation(lab)) for lab in (a, b, d)]
    return BenchCase(f"random_{seed}", "random", f"{words[0]},{words[1]}->{words[2]}",
                     {x: ext[x] for x in names}, dtype, "seeded random product")


def small_family() -> list[BenchCase]:
    """Tiny products (extents 2-8) where per-call overhead of a reused plan dominates."""
    shapes = [
        ("ij,jk->ik", {"i": 4, "j": 4, "k": 4}),
        ("abc,cd->abd", {"a": 3, "b": 5, "c": 4, "d": 6}),
        ("abcd,dbe->ace", {"a": 2, "b": 3, "c": 4, "d": 5, "e": 6}),
        ("ab,ab->ab", {"a": 8, "b": 8}),
        ("i,j->ij", {"i": 8, "j": 8}),
        ("abc,abc->", {"a": 4, "b": 4, "c": 4}),
    ]
    return [BenchCase(f"small_{i}", "small", e, x, "f64", "per-call overhead")
            for i, (e, x) in enumerate(shapes)]


_QUICK = ("ccsd_ring_akic", "ccsd_ring_akic_c128", "mps_env_ket", "attn_scores",
          "tucker_mode1", "hadamard", "inner_full", "attn_scores_f16")


#: Seeds of the random suite.
RANDOM_SEEDS = range(12)


def suite(name: str) -> list[BenchCase]:
    """Return the cases of a suite.

    Suites: ``quick`` (public subset at half size), ``full`` (public, domain generators and
    the random suite), ``random`` or ``small``.
    """
    if name == "small":
        return small_family()
    if name == "random":
        return [random_case(seed) for seed in RANDOM_SEEDS]
    public = load_public()
    if name == "quick":
        return [c.scaled(0.5) for c in public if c.name in _QUICK]
    if name == "full":
        generated = [generate(d, seed=i, size=1.0) for i, d in enumerate(DOMAINS[:3])]
        return public + generated + suite("random")
    raise ValueError(f"unknown suite {name!r}; choose quick, full, random or small")
