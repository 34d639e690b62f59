"""Exports to the layouts other engines load: ``python -m gumiho.export SUBCOMMAND``.

``target``: a target (the embedded default unless ``--model``) as an ordinary
transformers folder (gumiho.formats.transformers_folder); ``eagle3``: an eagle3 drafter as an
EAGLE-3 checkpoint folder (gumiho.export.eagle3, gumiho.formats.eagle3); ``gumiho``: a
gumiho drafter (this project's, or an official amd/Gumiho-* checkpoint) in the layout
the vLLM plugin plugins/vllm-gumiho serves (gumiho.export.gumiho); ``gguf``: an eagle3
drafter and its target as the GGUF files llama.cpp's server loads for its EAGLE-3
drafting (gumiho.export.gguf, gumiho.formats.eagle3_gguf). Each is a thin
command: the layouts themselves are written by gumiho.formats."""
from ..formats.transformers_folder import ExportedTarget, export_target

__all__ = ["ExportedTarget", "export_target"]
