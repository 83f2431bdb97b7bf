import subprocess
import sys


def test_tensorrt_package_imports_without_loading_tensorrt():
    code = (
        "import sys\n"
        "import generator.builder.tensorrt.builder, generator.builder.tensorrt.bindings, generator.builder.tensorrt.child\n"
        "import generator.builder.tensorrt.step, generator.builder.tensorrt.availability, generator.builder.manifest\n"
        "import generator.cli.check, generator.cli.plan, generator.cli.selftest\n"
        "import generator.builder.tensorrt.library, generator.builder.tensorrt.compatibility\n"
        "import generator.builder.tensorrt.plan_request, generator.builder.tensorrt.complete\n"
        "import generator.builder.tensorrt.selftest\n"
        "print('tensorrt' in sys.modules or 'tensorrt_bindings' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
