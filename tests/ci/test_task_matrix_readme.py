"""The README's task matrix covers every task head and precision (fast lane).

The cells themselves are checked against a real run by tests/integration/test_task_matrix.py; this catches a head
or precision added without the table being written again.
"""

from __future__ import annotations

from tests.integration import task_matrix as matrix


def test_readme_task_matrix_has_one_row_per_head_and_precision() -> None:
    rows = [line.split("|")[1:3] for line in matrix.readme_table(matrix.README.read_text()).splitlines()[2:]]
    pairs = [(head.strip(), precision.strip()) for head, precision in rows]
    expected = [(f"{task} ({matrix.EXPORTS[head]})", p) for head, task in matrix.HEADS.items() for p in matrix.PRECISIONS]
    assert pairs == expected, "README.md's task matrix is stale: TDE_WRITE_TASK_MATRIX=1 pytest " \
                              "tests/integration/test_task_matrix.py writes it"
