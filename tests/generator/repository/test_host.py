"""This host's TensorRT and GPU facts, as check compares them (here: no GPU, TensorRT stubs at most)."""

from generator.repository.host import MachineFacts, machine_facts, query_gpus, tensorrt_problem

TENSORRT_PROBLEM = tensorrt_problem()
GPUS, _, _, GPU_PROBLEM = query_gpus()


def test_stub_only_tensorrt_is_not_mistaken_for_tensorrt():
    import importlib.util

    spec = importlib.util.find_spec("tensorrt")
    if spec is not None and spec.origin is None:  # the tensorrt-stubs namespace folder
        assert TENSORRT_PROBLEM is not None and "stubs" in TENSORRT_PROBLEM


def test_machine_facts_agree_with_the_gpu_query():
    facts = machine_facts()
    assert isinstance(facts, MachineFacts)
    assert facts.gpus == GPUS
    assert (facts.gpu is None) == (not GPUS)
    if TENSORRT_PROBLEM is None:
        assert facts.tensorrt_version
