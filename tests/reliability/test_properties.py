"""Properties every backend must have, on products drawn by pytapp.conformance.strategies.

Every property runs for every backend (the C test library through clib included); the ci
profile draws 200 examples per property and backend, the nightly profile 10,000.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pytapp.conformance import CASES, run_instance
from pytapp.conformance.instance import Instance
from pytapp.conformance.strategies import misuses, products

OK = ("pass", "unsupported")


def _judge(inst: Instance, backend: str, threads: int | None = None) -> None:
    outcome = run_instance(inst, backend, threads)
    assert outcome.verdict in OK, f"{outcome.message}\n{outcome.description}"


@given(inst=products())
def test_valid_products_agree_with_oracle(any_backend: str, inst: Instance) -> None:
    """Within SPEC tolerance over D's whole allocation; NaN canaries outside every input
    footprint never reach D; D's allocation outside D is bit-for-bit unchanged."""
    with np.errstate(all="ignore"):
        _judge(inst, any_backend)


@given(inst=misuses())
def test_invalid_input_raises_spec_code_and_keeps_d(any_backend: str, inst: Instance) -> None:
    """Only TappError with the SPEC code (else the verdict is 'fail'); D untouched."""
    _judge(inst, any_backend)


@given(case=st.sampled_from([34, 35]), seed=st.integers(0, 2**20))
def test_overlapping_output_gives_out_of_place_result(any_backend: str, case: int,
                                                      seed: int) -> None:
    """D sharing memory with A, B or C (or being C) gives the out-of-place result."""
    _judge(CASES[case].make(seed), any_backend)


@given(inst=products(specials=False), threads=st.sampled_from([1, 2]))
def test_results_do_not_depend_on_thread_count(any_backend: str, inst: Instance,
                                               threads: int) -> None:
    """With 1 or 2 threads the result is within tolerance of the same oracle."""
    _judge(inst, any_backend, threads)
