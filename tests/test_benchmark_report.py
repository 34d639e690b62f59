"""The BENCHMARKS.md header names what the numbers depend on: the dtypes and the tree."""
from helpers import load_script


def test_header_names_the_dtypes_and_the_tree():
    report = load_script("benchmark_report")
    tree = dict(total_tokens=7, depth=5, top_k=4, mlp_top_k=2, mlp_keep=3, full_tree=True, full_tree_tokens=1)
    rec = {"dtype": "float32", "methods": {
        "vanilla": {"tree": None, "drafter_dtype": None},
        "gumiho": {"tree": tree, "drafter_dtype": "bfloat16"},
        "serial": {"tree": tree, "drafter_dtype": "bfloat16"}}}
    words = report.setup_words(rec)
    assert words == ("; target in float32; drafters in bfloat16; draft tree of 7 nodes plus up to 1 full-tree node, "
                     "depth 5, top-k 4 at the serial positions, 2 tokens per MLP head and path, "
                     "3 paths kept per MLP depth")
    # A record from before the drafter dtype was kept, without a full tree.
    old = {"dtype": "float32", "methods": {"gumiho": {"tree": dict(tree, full_tree=False)}}}
    assert report.setup_words(old) == ("; target in float32; draft tree of 7 nodes, depth 5, top-k 4 at the serial "
                                       "positions, 2 tokens per MLP head and path, 3 paths kept per MLP depth")
    # A cost-aware tree: its cap, and how many nodes each method's steps verified on average.
    aware = dict(tree, total_tokens=11, depth=3, full_tree=False, cost_aware=True)
    rec = {"dtype": "float32", "methods": {
        "vanilla": {"tree": None},
        "gumiho": {"tree": aware, "drafter_dtype": "bfloat16", "mean_drafted": 5.17},
        "serial": {"tree": aware, "drafter_dtype": "bfloat16", "mean_drafted": 4.9}}}
    assert report.setup_words(rec) == (
        "; target in float32; drafters in bfloat16; draft tree sized each step by the verify cost measured on "
        "this machine (gumiho.verifycost): at most 11 drafted nodes (drafted nodes per verify step: gumiho 5.2, "
        "serial 4.9), depth 3, top-k 4 at the serial positions, 2 tokens per MLP head and path, "
        "3 paths kept per MLP depth")
