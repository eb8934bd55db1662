"""genret bench-labels on tiny sizes: every method runs, masks agree, arguments are checked."""

import json

import numpy as np
import pytest

from experiments.bench.labels import (
    ENGINES,
    METHODS,
    MODES,
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


def test_python_trie_with_subsets_and_separator_masks_like_our_processor():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from decoding.hf import LabelLogitsProcessor
    from decoding.label_index import LabelIndex

    labels = random_labels(40, 30, 3, seed=2)
    labels = [x for x in labels if 29 not in x]  # 29: the separator
    rng = np.random.default_rng(0)
    allowed = rng.random((2, len(labels))) < 0.5
    allowed[:, :2] = True
    kw = {"separator": (29,), "max_labels": 3}
    idx = LabelIndex.build(labels, vocab_size=30)
    ours = LabelLogitsProcessor(idx, eos_token_id=0, allowed=allowed, **kw)
    trie = PythonTrieProcessor(labels, 0, prompt_len=2, allowed=allowed, **kw)
    ids = torch.tensor([[5, 6], [7, 8]])
    for t in range(8):
        if (ids[:, 2:] == 0).any(1).all():
            break  # every row finished (ours would start over, as `generate` stops here)
        want = torch.isfinite(ours(ids, torch.zeros(2, 30)))
        assert torch.equal(torch.isfinite(trie(ids, torch.zeros(2, 30))), want), t
        nxt = [int(rng.choice(np.flatnonzero(w.numpy()))) for w in want]
        ids = torch.cat([ids, torch.tensor(nxt)[:, None]], 1)


@pytest.mark.slow
def test_run_label_bench_tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cfg = LabelBenchConfig(
        num_labels=(30,), vocab=64, batch=2, beam=2, max_len=3, reps=1, modes=MODES, steps=(0, 1, 3)
    )
    out = run_label_bench(cfg)
    for mode, res in out["sizes"]["30"]["modes"].items():
        methods = res["methods"]
        ours = set(METHODS) - set(ENGINES) - ({"prefix_fn"} if mode != "single" else set())
        assert ours <= set(methods), mode
        for m in methods.values():
            assert set(m["per_step_ms"]) == {"0", "1", "3"}
            assert all(np.isfinite(list(m["per_step_ms"].values())))
        if "xgrammar" in methods and mode != "multi":
            assert set(methods["xgrammar"]["mask_agrees"].values()) == {1.0}
    json.dumps(out)
    assert "| 30 | single | jax_mask |" in markdown_table(out, "genret bench-labels")


def test_cli_rejects_bad_arguments(capsys):
    from experiments.cli import main

    assert main(["bench-labels", "--labels", "1k"]) == 1
    assert "--labels" in capsys.readouterr().err
    assert main(["bench-labels", "--methods", "fast"]) == 1
    assert "--methods" in capsys.readouterr().err
