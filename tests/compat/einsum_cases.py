"""Einsum calls ported from the parametrizations of NumPy's test_einsum.py, opt_einsum's
test_contract.py / test_edge_cases.py and torch's einsum tests (equations and shapes only;
the test code is ours). Each case is (equation, shapes); a shape of ``None`` is a Python
scalar."""

from __future__ import annotations

Shape = tuple[int, ...] | None
Case = tuple[str, list[Shape]]

#: Extents of the labels of the opt_einsum-style equations (our own choice of sizes).
SIZES = dict(zip("abcdefghijklmnopqABC", [2, 3, 4, 3, 2, 5, 3, 2, 4, 3, 2, 3, 4, 2, 3, 2, 4,
                                          3, 2, 3], strict=True))


def shapes_for(equation: str) -> list[Shape]:
    """One shape per input term of ``equation`` from :data:`SIZES`."""
    return [tuple(SIZES[ch] for ch in term) for term in equation.split("->")[0].split(",")]


def _sums(n: int) -> list[Case]:
    """The one- to three-operand forms of NumPy's sum tests, for extent ``n``."""
    return [
        ("i->", [(n,)]),
        ("...i->...", [(2, 3, n)]),
        ("i...->...", [(n, 2, 3)]),
        ("ii", [(n, n)]),
        ("ii->i", [(n, n)]),
        ("...ii->...i", [(2, n, n)]),
        ("ii...->...i", [(n, n, 3)]),
        ("ijk->jik", [(n, 3, 2)]),
        ("...,...", [(n,), ()]),
        ("...i,...i", [(2, 3, n), (n,)]),
        ("i...,i...", [(n, 2, 3), (n, 2, 3)]),
        ("i,j", [(3,), (n,)]),
        ("ij,j", [(4, n), (n,)]),
        ("ji,j", [(n, 4), (n,)]),
        ("ij,jk", [(4, n), (n, 6)]),
        ("ij,jk,kl", [(3, n), (n, 4), (4, 5)]),
        ("ijk,jil->kl", [(n, 3, 4), (3, n, 2)]),
        ("i,i,i->i", [(n,), (n,), (n,)]),
        (",i->", [None, (n,)]),
        ("i,->", [(n,), None]),
        ("i,->i", [(n,), None]),
        (",i->i", [None, (n,)]),
        ("i,i", [(n,), (n,)]),
    ]


NUMPY_SUMS: list[Case] = [case for n in (1, 3, 8, 15) for case in _sums(n)]

NUMPY_VIEWS: list[Case] = [
    ("...", [(6,)]), ("ij", [(2, 3)]), ("ji", [(2, 3)]), ("ii->i", [(3, 3)]),
    ("...ii->...i", [(2, 3, 3)]), ("ii...->...i", [(3, 3, 2)]), ("...ii->i...", [(2, 3, 3)]),
    ("jii->ij", [(2, 3, 3)]), ("ii...->i...", [(3, 3, 2)]), ("i...i->i...", [(3, 2, 3)]),
    ("i...i->...i", [(3, 2, 3)]), ("iii->i", [(3, 3, 3)]), ("ijk->jik", [(3, 4, 5)]),
    ("i->", [(5,)]), ("...i->...", [(2, 5)]), ("i...->...", [(5, 2)]), ("ii", [(4, 4)]),
    ("..., ...", [None, None]), ("bbcdc->d", [(1, 1, 3, 1, 3)]),
]

NUMPY_BROADCAST: list[Case] = [
    ("ij...,j...->ij...", [(2, 3, 4), (3,)]),
    ("ij...,...j->ij...", [(2, 3, 4), (3,)]),
    ("ij...,j->ij...", [(2, 3, 4), (3,)]),
    ("ik...,k...->i...", [(4, 3), (3, 2)]),
    ("ik...,...kj->i...j", [(4, 3), (3, 2)]),
    ("...k,kj", [(4, 3), (3, 2)]),
    ("ik,k...->i...", [(4, 3), (3, 2)]),
    ("ijkl,k", [(2, 3, 4, 5), (4,)]),
    ("...kl,k...", [(2, 3, 4, 5), (4,)]),
    ("...kl,k", [(2, 3, 4, 5), (4,)]),
    ("...lmn,lmno->...o", [(1, 1, 1, 6, 5, 4), (6, 5, 4, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ijk,kl,jl", [(1, 5, 4), (4, 6), (5, 6)]),
    ("ijk,kl,jl,i->i", [(1, 5, 4), (4, 6), (5, 6), (10,)]),
    ("abjk,kl,jl", [(1, 1, 5, 4), (4, 6), (5, 6)]),
    ("abjk,kl,jl,ab->ab", [(1, 1, 5, 4), (4, 6), (5, 6), (7, 7)]),
    ("ajk,kbl,jl,ab->ab", [(1, 5, 4), (4, 1, 6), (5, 6), (7, 7)]),
    ("obk,ijk->ioj", [(2, 4, 8), (2, 4, 8)]),
    ("ab,bc,bd->acd", [(5, 4), (1, 5), (4, 20)]),
    ("ijp,ipq,ikq->ijk", [(3, 1, 1), (3, 1, 3), (1, 3, 3)]),
    ("jhcabhijaci,dfijejgh->fgje", [(1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1), (3, 1, 3, 1, 1, 1, 1, 2)]),
    ("baegffahgc,hdggeff->dhg", [(2, 1, 4, 1, 1, 1, 1, 2, 1, 1), (1, 1, 1, 1, 4, 1, 1)]),
    ("cehgbaifff,fhhdegih->cdghbi", [(1,) * 10, (2, 1, 1, 2, 4, 1, 1, 1)]),
    ("gah,cdbcghefg->ef", [(2, 3, 1), (1, 3, 1, 1, 1, 2, 1, 4, 1)]),
    ("cacc,bcb->", [(1, 1, 1, 1), (1, 4, 1)]),
    ("...ft,mf->...mt", [(2, 3, 5), (4, 3)]),
    ("ba,ac,da->bcd", [(3, 2), (2, 4), (5, 2)]),
]

#: The equations of opt_einsum's test_contract (NumPy's optimize tests hold the same kinds).
OPT_EINSUM_EQUATIONS: list[str] = [
    "a,->a", "ab,->ab", ",ab,->ab", ",,->",
    "a,ab,abc->abc", "a,b,ab->ab",
    "ea,fb,gc,hd,abcd->efgh", "ea,fb,abcd,gc,hd->efgh", "abcd,ea,fb,gc,hd->efgh",
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac", "cd,bdhe,aidb,hgca,gc,hgibcd,hgac",
    "abhe,hidj,jgba,hiab,gab", "bde,cdh,agdb,hica,ibd,hgicd,hiac",
    "chd,bde,agbc,hiad,hgc,hgi,hiad", "chd,bde,agbc,hiad,bdi,cgh,agdb",
    "bdhe,acad,hiab,agac,hibd",
    "ab,ab,c->", "ab,ab,c->c", "ab,ab,cd,cd->", "ab,ab,cd,cd->ac", "ab,ab,cd,cd->cd",
    "ab,ab,cd,cd,ef,ef->",
    "ab,cd,ef->abcdef", "ab,cd,ef->acdf", "ab,cd,de->abcde", "ab,cd,de->be", "ab,bcd,cd->abcd",
    "ab,bcd,cd->abd",
    "eb,cb,fb->cef", "dd,fb,be,cdb->cef", "bca,cdb,dbf,afc->", "dcc,fce,ea,dbf->ab",
    "fdf,cdd,ccd,afe->ae", "abcd,ad", "ed,fcd,ff,bcf->be", "baa,dcf,af,cde->be",
    "bd,db,eac->ace", "fff,fae,bef,def->abd", "efc,dbc,acf,fd->abe",
    "ab,ab", "ab,ba", "abc,abc", "abc,bac", "abc,cba",
    "ab,bc", "ab,cb", "ba,bc", "ba,cb", "abcd,cd", "abcd,ab", "abcd,cdef", "abcd,cdef->feba",
    "abcd,efdc",
    "aab,bc->ac", "ab,bcc->ac", "aab,bcc->ac", "baa,bcc->ac", "aab,ccb->ac",
    "aab,fa,df,ecc->bde", "ecb,fef,bad,ed->ac", "bcf,bbb,fbf,fc->", "bb,ff,be->e",
    "bcb,bb,fc,fff->", "fbb,dfd,fc,fc->", "afd,ba,cc,dc->bf", "adb,bc,fa,cfc->d",
    "bbd,bda,fc,db->acf", "dba,ead,cad->bce", "aef,fbc,dca->bde",
]


def _opt_case(equation: str) -> Case:
    shapes: list[Shape] = [s if s else None for s in shapes_for(equation)]
    return equation, shapes


OPT_EINSUM: list[Case] = [_opt_case(eq) for eq in OPT_EINSUM_EQUATIONS]

#: Torch's einsum tests: plain forms, ellipses, repeated labels, empty extents.
TORCH: list[Case] = [
    ("i->", [(5,)]), ("i,i->", [(5,), (5,)]), ("i,i", [(5,), (5,)]), ("i,i->i", [(5,), (5,)]),
    ("i,j->ij", [(5,), (4,)]), ("ij->ji", [(3, 4)]), ("ij->j", [(3, 4)]), ("ij->i", [(3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]), ("ij,j->i", [(3, 4), (4,)]), ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ij,ab->ijab", [(3, 4), (2, 3)]), ("ijk->ikj", [(2, 3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("i...->...", [(3, 2, 4)]),
    ("...ik,...jk->...ij", [(2, 3, 4), (2, 5, 4)]), ("i...,j...->ij...", [(3, 2), (4, 2)]),
    ("ii", [(4, 4)]), ("ii->i", [(4, 4)]), ("iij->j", [(3, 3, 2)]), ("iji->j", [(3, 2, 3)]),
    ("ijij->ij", [(2, 3, 2, 3)]), ("iii->i", [(2, 2, 2)]), ("i,j,k->ijk", [(2,), (3,), (4,)]),
    ("ab,ab,ab->", [(2, 3)] * 3), ("ijk,ilk->ijl", [(2, 3, 4), (2, 5, 4)]),
    ("i->", [(0,)]), ("ij,jk->ik", [(0, 3), (3, 2)]), ("ij,jk->ik", [(2, 0), (0, 2)]),
    ("ij,jk->ik", [(2, 3), (3, 0)]), ("i,j->ij", [(0,), (3,)]), ("ii->i", [(0, 0)]),
    ("...,...", [(1, 4), (3, 1)]), ("ij,ij->", [(1, 4), (3, 1)]),
]
