"""The vLLM tests' shared fixtures (tests/vllm_fixtures.py), offered to every test here
by name: a test module imports only what it calls."""
from vllm_fixtures import exported_default, vllm_python  # noqa: F401  (fixtures, found by pytest here)
