"""--detector-spin run (ONNX Runtime's workers spin only while a run lasts) and alone (only for a run no other
detector instance overlaps, from a second session), served by the real embedded Triton: recorded in the manifest
and the detector's config, and the same outputs, bit for bit, as the default build."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from loadtest.metrics import BATCHES, published_phases
from tests.integration.helpers import OUTPUTS, infer, scene_bytes

pytestmark = pytest.mark.integration
DEFAULT, SPIN_RUN, SPIN_ALONE = "yolo_sleep", "yolo_spin_run", "yolo_spin_alone"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("detector_spin")
    default = build_repository(DEMO_ONNX, root / "default", BuildOptions(name=DEFAULT))
    spinning = build_repository(DEMO_ONNX, root / "spin", BuildOptions(name=SPIN_RUN, detector_spin="run"))
    build_repository(DEMO_ONNX, root / "alone", BuildOptions(name=SPIN_ALONE, detector_spin="alone"))
    assert "detector_spin" not in default.manifest.options or default.manifest.options["detector_spin"] == "off"
    assert spinning.manifest.options["detector_spin"] == "run"
    assert "--detector-spin run" in " ".join(spinning.manifest.rebuild)
    config = (root / "spin" / f"{SPIN_RUN}_detector" / "config.pbtxt").read_text()
    assert 'key: "spin_wait"' in config and 'string_value: "run"' in config
    log = root / "tritonserver.log"
    with EmbeddedServer(root / "default", free_port(), free_port(), free_port(), log_file=log,
                        extra_args=(f"--model-repository={root / 'spin'}",
                                    f"--model-repository={root / 'alone'}")) as running:
        yield running


@pytest.mark.parametrize("model", [SPIN_RUN, SPIN_ALONE])
@pytest.mark.parametrize("batch", [1, 3])
def test_outputs_are_bit_equal_to_the_default_build(server: EmbeddedServer, batch: int, model: str) -> None:
    images = [scene_bytes(seed=40 + batch + i, width=1280, height=720) for i in range(batch)]
    expected = infer(server, DEFAULT, images)
    assert expected["num_detections"].sum() > 0  # a comparison of empty outputs would prove nothing
    for _ in range(2):  # twice: the second run finds the pool after its spinning was stopped
        served = infer(server, model, images)
        for name in OUTPUTS:
            assert served[name].dtype == expected[name].dtype
            np.testing.assert_array_equal(served[name], expected[name], err_msg=name)


def test_a_lone_request_runs_on_the_spinning_session(server: EmbeddedServer) -> None:
    """One request at a time never overlaps another detector instance: every run is a run alone."""
    detector = f"{SPIN_ALONE}_detector"
    before = published_phases(server.metrics_url, (detector,))
    for seed in range(3):
        infer(server, SPIN_ALONE, [scene_bytes(seed=60 + seed, width=640, height=480)])
    after = published_phases(server.metrics_url, (detector,))
    ran = {phase: after[detector].get(phase, 0.0) - before.get(detector, {}).get(phase, 0.0)
           for phase in ("run", "run_alone", BATCHES)}
    assert ran[BATCHES] == 3 and ran["run_alone"] > 0 and ran["run"] == 0, ran
