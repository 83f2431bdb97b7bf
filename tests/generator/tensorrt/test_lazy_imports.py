import subprocess
import sys


def test_tensorrt_package_imports_without_loading_tensorrt():
    code = (
        "import sys\n"
        "import generator.tensorrt.builder, generator.tensorrt.bindings, generator.tensorrt.child\n"
        "import generator.tensorrt.legacy_calibrator, generator.tensorrt.availability, generator.manifest\n"
        "import generator.commands.check\n"
        "print('tensorrt' in sys.modules or 'tensorrt_bindings' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
