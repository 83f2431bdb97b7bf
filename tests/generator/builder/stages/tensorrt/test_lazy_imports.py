import subprocess
import sys


def test_tensorrt_package_imports_without_loading_tensorrt():
    code = (
        "import sys\n"
        "import generator.builder.stages.tensorrt.builder, generator.builder.stages.tensorrt.bindings, generator.builder.stages.tensorrt.child\n"
        "import generator.builder.stages.tensorrt.stage, generator.builder.stages.tensorrt.availability\n"
        "import generator.repository.manifest, generator.repository.check, generator.repository.host\n"
        "import generator.cli.check, generator.cli.plan, generator.cli.selftest\n"
        "import generator.repository.libnvinfer, generator.repository.compatibility\n"
        "import generator.builder.stages.tensorrt.plan_request, generator.builder.plan\n"
        "import generator.operate.selftest\n"
        "print('tensorrt' in sys.modules or 'tensorrt_bindings' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
