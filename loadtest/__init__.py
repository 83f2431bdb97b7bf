"""Load tests and benchmarks for the served detection ensemble: Locust, perf_analyzer and a bench harness.

``python -m loadtest run|perf-analyzer|bench|compare|soak``; the Locust users live in ``loadtest.users`` and are loaded
by Locust through ``loadtest/locustfile.py``.
"""
