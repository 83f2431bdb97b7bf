import subprocess
import sys


def test_tensorrt_package_imports_without_loading_tensorrt():
    code = (
        "import sys\n"
        "import generator.build.tensorrt.builder, generator.build.tensorrt.bindings, generator.build.tensorrt.child\n"
        "import generator.build.tensorrt.legacy_calibrator, generator.build.tensorrt.availability, generator.build.manifest\n"
        "import generator.cli.check\n"
        "print('tensorrt' in sys.modules or 'tensorrt_bindings' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
