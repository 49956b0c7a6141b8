"""Test support, not tests: the helpers the test folders share (slice shapes, the plan engine runner, the CRD
schemas and their fetch, a fake Kubernetes API, doctor snapshots, a Prometheus server, the rendered plans).

Nothing here is collected (no ``test_`` module); the plan fixtures reach every folder as a plugin of
``tests/conftest.py``.
"""
