"""``python -m gumiho.serve``: a drafter of this project served by a serving engine.
Today the engine is vLLM (gumiho.serving.vllm_command has the command and says what
it does); the serving package holds each engine's environment, driver and command."""
import sys

from .serving.vllm_command import main

if __name__ == "__main__":
    sys.exit(main())
