"""The metrics parser on real text scraped from the embedded Triton before and after a short load."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.errors import MetricsError
from loadtest.metrics import StageStats, model_counters, parse_prometheus, stage_deltas, stages_table

DATA = Path(__file__).parent / "data"


def _value(text: str, line_start: str) -> float:
    """Read one sample straight from the text, independently of the parser under test."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(line_start)]
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def before_text() -> str:
    return (DATA / "triton_metrics_before.txt").read_text()


@pytest.fixture(scope="module")
def after_text() -> str:
    return (DATA / "triton_metrics_after.txt").read_text()


def test_parses_every_sample_line(after_text):
    samples = parse_prometheus(after_text)
    sample_lines = [ln for ln in after_text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(samples) == len(sample_lines)
    names = {s.name for s in samples}
    assert {"nv_inference_request_success", "nv_inference_exec_count", "nv_cpu_utilization"} <= names


def test_counters_per_model_match_the_text(after_text):
    counters = model_counters(parse_prometheus(after_text))
    assert set(counters) == {"yolo", "yolo_preprocess", "yolo_detector", "yolo_nms"}
    for model in counters:
        expected = _value(after_text, f'nv_inference_request_success{{model="{model}",version="1"}}')
        assert counters[model]["nv_inference_request_success"] == expected
        assert counters[model]["nv_inference_exec_count"] == _value(
            after_text, f'nv_inference_exec_count{{model="{model}",version="1"}}'
        )


def test_failures_are_summed_over_reasons():
    text = (
        'nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 3\n'
        'nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 4\n'
        'nv_inference_request_failure{model="m",reason="OTHER",version="2"} 1\n'
    )
    assert model_counters(parse_prometheus(text))["m"]["nv_inference_request_failure"] == 8


def test_deltas_between_real_scrapes(before_text, after_text):
    stages = stage_deltas(model_counters(parse_prometheus(before_text)), model_counters(parse_prometheus(after_text)))
    for model, s in stages.items():
        key = f'{{model="{model}",version="1"}}'
        ok = _value(after_text, "nv_inference_request_success" + key) - _value(before_text, "nv_inference_request_success" + key)
        execs = _value(after_text, "nv_inference_exec_count" + key) - _value(before_text, "nv_inference_exec_count" + key)
        infers = _value(after_text, "nv_inference_count" + key) - _value(before_text, "nv_inference_count" + key)
        queue = _value(after_text, "nv_inference_queue_duration_us" + key) - _value(before_text, "nv_inference_queue_duration_us" + key)
        assert ok > 0, "the fixture was scraped around a real load"
        assert s.requests == ok
        assert s.avg_batch == pytest.approx(infers / execs, abs=0.01)
        assert s.queue_us == pytest.approx(queue / ok, abs=0.1)
    # The ensemble's end-to-end server time covers the composing steps.
    assert stages["yolo"].request_us is not None and stages["yolo_detector"].compute_infer_us is not None
    assert stages["yolo"].request_us >= stages["yolo_detector"].compute_infer_us


def test_a_model_that_did_nothing_has_no_averages(after_text):
    counters = model_counters(parse_prometheus(after_text))
    stages = stage_deltas(counters, counters)
    assert all(s.requests == 0 and s.avg_batch is None and s.queue_us is None for s in stages.values())
    assert len(stages_table(stages)) == 2 + len(stages)


def test_labels_with_escaped_quotes_and_timestamps():
    (sample,) = parse_prometheus('nv_inference_count{model="a \\"quoted\\" name",version="1"} 7 1712345678000\n')
    assert sample.labels["model"] == 'a "quoted" name'
    assert sample.value == 7


def test_malformed_line_is_rejected_with_its_number():
    with pytest.raises(MetricsError, match="line 2"):
        parse_prometheus("# HELP x y\nthis is not a sample\n")


def test_unreachable_endpoint_says_where():
    from loadtest.metrics import scrape

    with pytest.raises(MetricsError, match=r"127\.0\.0\.1:9"):
        scrape("127.0.0.1:9", timeout_s=1)


def test_phase_counters_become_milliseconds_per_batch_in_the_order_a_batch_goes() -> None:
    from loadtest.metrics import phase_counters, phase_deltas, phases_table

    def text(batches: int, run_s: float, inputs_s: float) -> str:
        return (f'ensemble_step_phase_seconds_total{{model="m_detector",version="1",phase="responses"}} 0.01\n'
                f'ensemble_step_phase_seconds_total{{model="m_detector",version="1",phase="run"}} {run_s}\n'
                f'ensemble_step_phase_seconds_total{{model="m_detector",version="1",phase="inputs"}} {inputs_s}\n'
                f'ensemble_step_batches_total{{model="m_detector",version="1"}} {batches}\n'
                f'ensemble_step_batches_total{{model="m_nms",version="1"}} 3\n')

    before = phase_counters(parse_prometheus(text(10, 1.0, 0.1)))
    after = phase_counters(parse_prometheus(text(14, 1.2, 0.104)))
    deltas = phase_deltas(before, after)
    assert deltas == {"m_detector": {"batches": 4, "ms_per_batch": {"inputs": 1.0, "run": 50.0, "responses": 0.0}}}
    stage = StageStats(4, 0, 4, 4, 1.0, 60000.0, 100.0, 2000.0, 55000.0, 1000.0)
    assert phases_table({"m_detector": stage}, deltas)[2] == (
        "| m_detector | 4 | 58.00 | inputs 1.00, run 50.00, responses 0.00 | 7.00 |")
