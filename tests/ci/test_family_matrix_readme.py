"""The README's family matrix covers every fixture family, precision and refused head (fast lane).

The cells themselves are checked against a real run by tests/integration/test_family_matrix.py; this catches a
family or precision added to the fixtures or the matrix without the table being written again.
"""

from __future__ import annotations

from tests.fixtures import ultralytics as fixtures
from tests.integration import family_matrix as matrix


def test_readme_family_matrix_has_one_row_per_family_and_precision_and_refused_head() -> None:
    rows = [line.split("|")[1:3] for line in matrix.readme_table(matrix.README.read_text()).splitlines()[2:]]
    pairs = [(family.strip(), precision.strip()) for family, precision in rows]
    expected = [(f, p) for f in fixtures.FAMILIES for p in matrix.PRECISIONS]
    expected += [(f"{head} (yolo11n-{head})", "any") for head in fixtures.UNSERVED_HEADS]
    assert pairs == expected, "README.md's family matrix is stale: TDE_WRITE_FAMILY_MATRIX=1 pytest " \
                              "tests/integration/test_family_matrix.py writes it"
