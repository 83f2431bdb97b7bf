import ast
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / ".ci"))
from stubs_for_mypy import repair, write_stubs

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


@pytest.mark.slow
def test_tensorrt_code_type_checks_against_the_real_api(tmp_path):
    """With the repaired stubs TensorRT types are real (not Any), and generator/builder/stages/tensorrt passes."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    try:
        importlib.metadata.version("tensorrt-stubs")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tensorrt-stubs is not installed")
    if shutil.which("mypy") is None and importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed")
    stubs = tmp_path / "stubs"
    write_stubs(stubs)
    root = Path(__file__).resolve().parents[2]
    probe = tmp_path / "probe.py"
    probe.write_text("import tensorrt as trt\n\ntrt.Builder(1)\n")
    env = {"MYPYPATH": str(stubs), "PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(root / "pyproject.toml")]
    wrong = subprocess.run(
        [*base, str(probe)], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    assert 'Argument 1 to "Builder" has incompatible type "int"; expected "ILogger"' in wrong.stdout
    ours = subprocess.run(
        [*base, "generator/builder/stages/tensorrt"], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    assert ours.returncode == 0, ours.stdout
