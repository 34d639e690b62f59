"""Serving engines beside this project's own loop. vLLM lives in a virtual environment of
its own (gumiho.serving.vllm_env): it pins torch and transformers versions that differ
from this project's, so the two never share one interpreter; a driver script run by that
environment's python (gumiho/serving/vllm_driver.py) takes paths and token ids in and
writes JSON out."""
