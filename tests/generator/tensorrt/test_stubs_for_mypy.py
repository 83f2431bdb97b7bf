import ast
import importlib.metadata

import pytest

from generator.tensorrt.stubs_for_mypy import repair, write_stubs

BROKEN = '''class Plugin:
    def get_workspace_size(self, in: list[int], out: list[int]) -> int:
        """
            docs
        """
    def add_scale_nd(self, input: int, shift: int = None, scale: int = None, channel_axis: int) -> int:
        ...
'''


def test_repair_fixes_keyword_params_and_default_order():
    with pytest.raises(SyntaxError):
        ast.parse(BROKEN)
    fixed = repair(BROKEN, "broken.pyi")
    ast.parse(fixed)
    assert "in_: list[int]" in fixed
    assert "channel_axis: int = ..." in fixed


def test_repair_gives_up_loudly_on_other_errors():
    with pytest.raises(SystemExit, match="cannot repair"):
        repair("def f(x y) -> int: ...\n", "bad.pyi")


def test_installed_stubs_become_parseable(tmp_path):
    try:
        importlib.metadata.version("tensorrt-stubs")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tensorrt-stubs is not installed")
    written = write_stubs(tmp_path)
    assert {p.name for p in written} >= {"__init__.pyi", "tensorrt.pyi"}
    for path in written:
        ast.parse(path.read_text())
