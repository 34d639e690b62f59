"""The benchmark: vanilla and speculative decoding on the same prompts, in one process.

    python -m gumiho.bench --prompts mt_bench.jsonl --limit 10 --max-new-tokens 64

For every prompt the methods run one after the other (vanilla first, then each
speculative method), so whatever else the machine is doing slows all of them alike.
A warm-up on the first prompts comes first and is not counted. The table and the
JSON use the metric words of :mod:`gumiho.engine.metrics`; ``speedup_vs_vanilla`` is
vanilla's total wall time over the method's when both wrote the same number of
tokens on every prompt, else (sampling) the method's tokens/s over vanilla's, and
``speedup_kind`` says which ("wall time" or "throughput"); ``lossless`` counts, at
temperature 0, the (prompt, speculative method) pairs whose tokens equal vanilla's.

The core, :func:`run_benchmark`, takes loaded models and is what the tests call;
:func:`main` parses the command line, loads models and prompt files, and prints.

The modules, in the order data flows through them:

    prompts          Prompt, load_prompts, prompt_ids: the prompts and their token ids
    methods          method names, DRAFTER_FLAGS, HFGenerate, resolve_drafters
    runner           BenchSettings, run_benchmark: the interleaved runs and their record
    table            format_table: the printed table
    cli              build_parser, main: ``python -m gumiho.bench``

and the commands that read the records back:

    records          the records of a folder, in table order, and their speedups
    report           ``python -m gumiho.bench.report``: BENCHMARKS.md's tables and figure
    compare_drafters ``python -m gumiho.bench.compare_drafters``: methods of one record, paired
    compare_records  ``python -m gumiho.bench.compare_records``: one method in two records, paired
"""
from .cli import build_parser, main, parse_methods, tree_from_args
from .methods import (
                      COPY_METHODS,
                      DRAFTER_FLAGS,
                      DRAFTER_METHODS,
                      HF_LOOKUP_TOKENS,
                      HF_METHODS,
                      METHODS,
                      SPECULATIVE_METHODS,
                      HFGenerate,
                      registry_lookup,
                      resolve_drafters,
)
from .prompt_sets import Prompt, load_prompts, prompt_ids
from .runner import TABLE_POSITIONS, BenchSettings, run_benchmark
from .table import format_table

__all__ = ["BenchSettings", "COPY_METHODS", "DRAFTER_FLAGS", "DRAFTER_METHODS", "HFGenerate", "HF_LOOKUP_TOKENS",
           "HF_METHODS", "METHODS", "Prompt", "SPECULATIVE_METHODS", "TABLE_POSITIONS", "build_parser",
           "format_table", "load_prompts", "main", "parse_methods", "prompt_ids", "registry_lookup",
           "resolve_drafters", "run_benchmark", "tree_from_args"]
