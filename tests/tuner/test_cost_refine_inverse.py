"""The cost fit's plain-Python 3 x 3 inverse, checked against numpy on matrices that exercise each step of
Gauss-Jordan elimination: a pivot of exactly 1, an off-pivot entry of exactly 1, a row swap that must not reach back
to rows already reduced, and a singular matrix."""

from __future__ import annotations

import numpy as np
import pytest

from specdecode_operator.tuner.cost_refine import SingularMatrix, inverse3


@pytest.mark.parametrize(
    "m",
    [
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],  # every pivot exactly 1
        [[2.0, 1.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 1.0]],  # an entry of exactly 1 below the first pivot
        # after the first column, the reduced first row holds 10 in column 2, more than any row left to choose from:
        # the pivot must come from rows 2 and 3 only
        [[1.0, 10.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        [[0.0, 2.0, 1.0], [3.0, 1.0, 0.0], [1.0, 0.0, 4.0]],  # a zero first pivot: a row swap is needed
        [[4.0, -2.0, 1.0], [-2.0, 4.0, -2.0], [1.0, -2.0, 4.0]],
    ],
)
def test_inverse3_matches_numpy(m):
    assert np.array(inverse3(m)) == pytest.approx(np.linalg.inv(np.array(m)), abs=1e-12)


def test_inverse3_refuses_a_singular_matrix():
    with pytest.raises(SingularMatrix):
        inverse3([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
