"""Test support, not tests: the helpers the test folders share (slice shapes, the stacks and configs the tests
build on, the plan engine runner, the CRD schemas and their fetch, a fake Kubernetes API, doctor snapshots and
in-memory cluster objects, the policy pack's runs, a Prometheus server, the rendered plans; for the workload tests,
chip seats, goodput by hand, the portable model contract, runs on two emulated chips, scripts of gloo ranks, and the
torch_tpu venv with its launcher harness, ``launch_env.py``, a script that venv runs).

Nothing here is collected (no ``test_`` module); the plan fixtures reach every folder as a plugin of
``tests/conftest.py``.
"""
