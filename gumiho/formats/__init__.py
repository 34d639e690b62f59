"""Drafters in other projects' checkpoint layouts, read into the engine and written
out for the engines that serve them.

    eagle3     EAGLE-3 (the EAGLE repository, SpecForge, speculators), in and out
    medusa     Medusa-1 heads (FasterDecoding's and vLLM's layouts), in
    vllm_gumiho  Gumiho drafters in the layout the vLLM plugin (plugins/vllm-gumiho) serves, out
    detect     which layout a folder's config.json describes

The official Gumiho checkpoints (amd/Gumiho-*) are read by gumiho.formats.official."""
