"""genret bench-labels on tiny sizes: every method runs, masks agree, arguments are checked."""

import json

import numpy as np
import pytest

from experiments.bench.labels import (
    METHODS,
    LabelBenchConfig,
    PythonTrieProcessor,
    markdown_table,
    prefix_fn_processor,
    random_labels,
    run_label_bench,
)


def test_random_labels_are_distinct_and_in_range():
    labels = random_labels(200, 50, 4, seed=0)
    assert len({tuple(x) for x in labels}) == 200
    assert all(1 <= t < 50 and 1 <= len(x) <= 4 for x in labels for t in x)


def test_baselines_mask_like_our_processor():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from decoding.hf import LabelLogitsProcessor
    from decoding.label_index import LabelIndex

    labels = random_labels(40, 30, 3, seed=1)
    ours = LabelLogitsProcessor(LabelIndex.build(labels, vocab_size=30), eos_token_id=0)
    trie = PythonTrieProcessor(labels, 0, prompt_len=2)
    pfn = prefix_fn_processor(labels, 0, prompt_len=2, num_beams=2)
    ids = torch.tensor([[5, 6, *labels[0][:1]], [7, 8, *labels[1][:1]]])
    scores = torch.zeros(2, 30)
    ours(ids[:, :2], scores)  # the first step, so that ours follows the rows from there
    want = torch.isfinite(ours(ids, scores))
    assert torch.equal(torch.isfinite(trie(ids, scores)), want)
    assert torch.equal(torch.isfinite(pfn(ids, scores)), want)


@pytest.mark.slow
def test_run_label_bench_tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cfg = LabelBenchConfig(num_labels=(30,), vocab=64, batch=2, beam=2, max_len=3, reps=1)
    out = run_label_bench(cfg)
    methods = out["sizes"]["30"]["methods"]
    assert set(methods) == set(METHODS)
    for m in methods.values():
        assert len(m["per_step_ms"]) == 4 and all(np.isfinite(m["per_step_ms"]))
    assert "speedup_vs_python_trie" in methods["jax_mask"]
    json.dumps(out)
    assert "| 30 | jax_mask |" in markdown_table(out, "genret bench-labels")


def test_cli_rejects_bad_arguments(capsys):
    from experiments.cli import main

    assert main(["bench-labels", "--labels", "1k"]) == 1
    assert "--labels" in capsys.readouterr().err
    assert main(["bench-labels", "--methods", "fast"]) == 1
    assert "--methods" in capsys.readouterr().err
