"""`genret classify` end to end on a tiny generated meta file: constrained outputs are labels."""

import dataclasses
import json

import numpy as np
import pytest

from data.errors import ArgumentError, InputError
from experiments.classify import data as cd
from experiments.classify.run import (
    ClassifyConfig,
    prepare,
    result_path,
    run_classify,
    run_dir,
    train,
)
from experiments.cli import main

_PATHS = [
    ["Shop", "Hair Care", "Shampoos"],
    ["Shop", "Hair Care", "Conditioners"],
    ["Shop", "Skin Care", "Face"],
    ["Shop", "Skin Care", "Face", "Cleansers"],
    ["Shop", "Makeup"],
]
_WORDS = ["shampoo", "conditioner", "cream", "cleanser", "lipstick"]


def _write_meta(path, n=60, bad_line=None):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        k = int(rng.integers(len(_PATHS)))
        paths = [_PATHS[k]] + ([_PATHS[(k + 2) % 5]] if i % 4 == 0 else [])
        d = {"asin": f"A{i:04d}", "title": f"{_WORDS[k]} no {i}", "categories": paths}
        if i % 2:
            d["brand"] = "Acme"
        lines.append(repr(d))
    if bad_line is not None:
        lines.insert(bad_line - 1, "{'asin': 'broken'")
    path.write_text("\n".join(lines) + "\n")
    return path


def _tiny(meta, **kw) -> ClassifyConfig:
    base = dict(
        dataset="file",
        meta_path=str(meta),
        test_fraction=0.25,
        val_fraction=0.1,
        prompt_len=8,
        target_len=16,
        max_labels=3,
        num_layers=1,
        d_model=16,
        num_heads=2,
        mlp_dim=32,
        batch_size=8,
        epochs=2,
        warmup_steps=2,
        checkpoint_every=3,
        eval_batch=8,
        beam_size=2,
        latency_items=0,
    )
    return ClassifyConfig(**{**base, **kw})


def test_read_items_strips_shared_root_and_orders_leaf_first(tmp_path):
    cat = cd.read_items(_write_meta(tmp_path / "meta.txt"))
    assert cat.root == "Shop" and cat.report["items"] == 60
    first = cat.items[0]  # "Skin Care > Face" plus, every 4th item, a second path
    assert all(" > " not in p or not p.startswith("Shop") for it in cat.items for p in it.paths)
    assert len(first.paths) == 2 and first.paths[0].count(">") >= first.paths[1].count(">")


def test_bad_meta_line_names_file_and_line(tmp_path):
    meta = _write_meta(tmp_path / "meta.txt", bad_line=5)
    with pytest.raises(InputError, match=r"meta\.txt:5: malformed metadata"):
        cd.read_items(meta)
    code = main(["classify", "--dataset", "file", "--meta", str(meta), "--workdir", str(tmp_path)])
    assert code == 1


def test_word_pieces_round_trip():
    vocab = cd.WordPieces.fit(["Skin Care cream", "cream"], ["Skin Care > Face"], max_words=8)
    for text in ["Skin Care > Face", "crème brûlée 3.5oz", "  two  spaces"]:
        assert vocab.decode(vocab.encode(text)) == text
    assert len(vocab.encode("Skin Care > Face")) == 4


def test_classify_end_to_end_constrained_outputs_are_labels(tmp_path):
    cfg = _tiny(_write_meta(tmp_path / "meta.txt"))
    out = run_classify(cfg, tmp_path / "w", log=lambda m: None)
    saved = json.loads(result_path(tmp_path / "w", "file").read_text())
    assert saved["results"].keys() == {"single", "multi"}
    for task, methods in saved["results"].items():
        assert "unconstrained greedy" in methods
        for name, m in methods.items():
            for field in ("valid_share", "exact_match", "precision", "recall", "f1"):
                assert 0.0 <= m[field] <= 1.0, (task, name, field)
            assert m["latency"]["throughput"]["item_ms_median"] > 0
            if name.startswith("constrained"):
                # The acceptance property: every constrained output is a label set, no repeats.
                assert m["valid_share"] == 1.0, (task, name)
                assert m["repeated_label_share"] == 0.0, (task, name)
                if task == "single":
                    assert m["labels_per_output"] == 1.0
    record = out["training"]
    assert record["steps"] == 2 * record["steps_per_epoch"] and len(record["val_loss"]) == 2
    # Training again resumes the finished run (its last checkpoint) instead of starting over.
    logs = []
    _, _, again = train(cfg, prepare(cfg), run_dir(tmp_path / "w", "file"), log=logs.append)
    assert again["val_loss"] == record["val_loss"] and logs[0].startswith("resumed from step")
    # Other training settings in the same folder: refused, the run left as it was.
    other = dataclasses.replace(cfg, learning_rate=cfg.learning_rate / 2)
    with pytest.raises(ArgumentError, match="holds a run with other settings"):
        train(other, prepare(other), run_dir(tmp_path / "w", "file"), log=logs.append)


@pytest.mark.real_data
def test_beauty_meta_reads_as_documented(amazon_root):
    cat = cd.read_items(amazon_root / "Beauty" / "meta_Beauty.json.gz")
    # Every Beauty item has one path under "Beauty"; 7 items have no title (data README).
    assert cat.root == "Beauty" and cat.report["items"] == 12094
    assert cat.report["multi_path_items"] == 0
    assert not any(p.startswith("Beauty > ") for it in cat.items for p in it.paths)
