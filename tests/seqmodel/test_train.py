import dataclasses
import json
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data.errors import ArtifactError
from data.examples import RetrieverData, cold_start_examples, loo_examples
from data.pipeline import HistorySource, batches
from data.types import Catalog, Histories, InteractionData
from decoding import StaticConstraint, StaticIndex
from rqvae.sids import check_sids_match
from seqmodel.config import SeqModelConfig
from seqmodel.inference import retrieval_fn
from seqmodel.state import init_model
from seqmodel.tokens import (
    PAD,
    TokenizeExample,
    TokenSpace,
    WindowSource,
    encode_histories,
    sid_tokens,
)
from seqmodel.train import TrainResult, loss_fn, train_and_evaluate
from tests.conftest import run_on_forced_cpu_devices
from tests.seqmodel.conftest import random_unique_sids

N, V, LEVELS = 40, 8, 3
CFG = SeqModelConfig(
    num_layers=1,
    d_model=16,
    num_heads=2,
    mlp_dim=32,
    max_history=4,
    batch_size=8,
    eval_every=2,
    max_steps=4,
    eval_beam_size=4,
    warmup_steps=1,
    dropout=0.1,
    eval_users=5,
)


def _dataset(num_users=64, seed=0) -> InteractionData:
    rng = np.random.default_rng(seed)
    lists = [rng.choice(N, rng.integers(3, 8), replace=False) for _ in range(num_users)]
    catalog = Catalog(
        asins=np.array([f"A{i:03d}" for i in range(N)]),
        texts=[""] * N,
        leaf_categories=[""] * N,
        first_time=np.arange(N, dtype=np.int64) * 86400,  # item i is newer than item i - 1
    )
    return InteractionData(
        name="t",
        user_ids=np.array([f"U{u}" for u in range(num_users)]),
        catalog=catalog,
        histories=Histories.from_lists(lists),
    )


def _data(fraction=0.1, cfg=CFG) -> RetrieverData:
    sids = random_unique_sids(N, LEVELS, V)
    return cold_start_examples(
        _dataset(),
        sids,
        codebook_size=V,
        fraction=fraction,
        eval_users=cfg.eval_users,
        seed=cfg.seed,
    )


def _logged(workdir: Path) -> list[dict]:
    """metrics.jsonl without the timing-dependent tokens/s and training seconds."""
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    timing = ("tokens_per_s", "train_seconds")
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


def _params(result):
    return jax.tree.leaves(jax.device_get(result.state.params))


class Resumed(NamedTuple):
    straight: TrainResult  # trained without a stop
    resumed: TrainResult  # the other run, stopped after two steps and resumed to the end
    logged: list[dict]  # metrics.jsonl of either, timings aside


def assert_resumes_exactly(cfg, root: Path, data, params=_params, same_log=True) -> Resumed:
    """Trains `cfg` straight through in root/a and, in root/b, stopped after two steps and
    resumed: as many steps, the same parameters (`params` of each result) and, with `same_log`,
    the same metrics.jsonl (timings aside; a stop validates, so not where eval_every skips 2)."""
    straight = train_and_evaluate(cfg, root / "a", data, show_progress=False)
    first = train_and_evaluate(cfg, root / "b", data, stop_after=2, show_progress=False)
    resumed = train_and_evaluate(cfg, root / "b", data, show_progress=False)
    assert first.summary["steps"] == 2
    assert resumed.summary["steps"] == straight.summary["steps"]
    for a, b in zip(params(straight), params(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    logged = _logged(root / "a")
    if same_log:
        assert logged == _logged(root / "b"), "resume changed losses or recalls"
    return Resumed(straight, resumed, logged)


@pytest.mark.slow
def test_resume_after_two_steps_equals_uninterrupted_run(tmp_path):
    run = assert_resumes_exactly(CFG, tmp_path, _data())
    assert run.resumed.summary["steps"] == 4
    assert (tmp_path / "b" / "metrics.jsonl").stat().st_size > 0
    assert (tmp_path / "b" / "checkpoints" / "best").is_dir()


@pytest.mark.slow
def test_resume_in_another_environment_is_said_and_recorded(tmp_path, capsys):
    data = _data()
    train_and_evaluate(CFG, tmp_path, data, stop_after=2, show_progress=False)
    info_path = tmp_path / "retriever.json"
    info = json.loads(info_path.read_text())
    (now,) = info["environments"]
    assert now["packages"]["jax"] == jax.__version__
    assert train_and_evaluate(CFG, tmp_path, data, stop_after=3, show_progress=False)
    assert len(json.loads(info_path.read_text())["environments"]) == 1  # same one: no line
    assert "another environment" not in str(capsys.readouterr())
    # As if the first steps had run under another jax.
    old = {**now, "packages": {**now["packages"], "jax": "0.0.1"}}
    info_path.write_text(json.dumps({**info, "environments": [old]}))
    result = train_and_evaluate(CFG, tmp_path, data, show_progress=False)
    assert result.summary["steps"] == 4 and result.summary["environment"] == now
    said = capsys.readouterr().out  # tqdm.write: beside the progress bar
    assert f"jax: 0.0.1 -> {jax.__version__}" in said and "step 3" in said, said
    assert json.loads(info_path.read_text())["environments"] == [old, now]


@pytest.mark.slow
def test_changed_inputs_start_over_instead_of_resuming(tmp_path):
    data = _data()
    train_and_evaluate(CFG, tmp_path, data, stop_after=2, show_progress=False)
    other = dataclasses.replace(data, sids=random_unique_sids(N, LEVELS, V, seed=1))
    result = train_and_evaluate(CFG, tmp_path, other, stop_after=1, show_progress=False)
    assert result.summary["steps"] == 1, "resumed a checkpoint trained on other SIDs"
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1]


def test_initial_loss_is_near_uniform_over_codes():
    data = _data()
    space = TokenSpace(num_levels=LEVELS, codebook_size=V)
    graphdef, params = nnx.split(init_model(CFG, space))
    tf = TokenizeExample(sid_tokens(data.sids, V), CFG.max_history, "causal")
    ex = [tf.map({"items": data.train[u]}) for u in range(8)]
    batch = {k: jnp.asarray(np.stack([e[k] for e in ex])) for k in ex[0]}
    loss, aux = jax.jit(loss_fn, static_argnums=1)(params, graphdef, batch, None)
    # Fresh weights give near-uniform softmaxes over each level's V codes: loss ~ ln V.
    assert abs(float(loss) - np.log(V)) < 0.1, f"initial loss {loss} far from ln V={np.log(V)}"
    assert float(aux["count"]) == float(batch["weights"].sum()) > 0


@pytest.mark.parametrize("layout", ["causal", "sliding"])
def test_no_cold_item_in_any_training_batch_over_an_epoch(layout):
    cfg = dataclasses.replace(CFG, layout=layout)
    data = _data(fraction=0.25, cfg=cfg)
    cold = np.flatnonzero(~data.allowed)
    assert len(cold) >= 10
    tok = sid_tokens(data.sids, V)
    source = HistorySource(data.train) if layout == "causal" else WindowSource(data.train, 4)
    ds = batches(source, TokenizeExample(tok, 4, layout), batch_size=4, seed=0, num_epochs=1)
    cold_rows = {tuple(b) for b in tok[cold]}
    seen_items = 0
    for batch in ds:
        # Whole-SID check: every item block of the inputs and targets is a non-cold item.
        for row in np.concatenate([batch["inputs"], batch["targets"]]):
            body = row[row > 1]
            blocks = body[: len(body) // LEVELS * LEVELS].reshape(-1, LEVELS)
            assert not any(tuple(b) in cold_rows for b in blocks)
            seen_items += len(blocks)
    assert seen_items > 0


def test_validation_targets_are_held_out_of_training():
    data = _data()
    assert len(data.valid_targets) == CFG.eval_users
    assert data.allowed[data.valid_targets].all()
    # Training is the cold-start split's, less one held-out item per validation user.
    from data.splits import cold_start_split

    split = cold_start_split(_dataset(), 0.1)
    assert not np.isin(data.train.items, np.flatnonzero(~data.allowed)).any()
    assert len(data.train.items) == len(split.train.items) - len(data.valid_targets)


def test_tokenizer_artifact_that_does_not_match_catalog_is_an_error():
    catalog = [f"A{i}" for i in range(3)]
    with pytest.raises(ValueError, match="2 SIDs for a prepared catalog of 3"):
        check_sids_match(["A0", "A1"], catalog, "W/tokenizer")
    with pytest.raises(ValueError, match="asins.txt line 2"):
        check_sids_match(["A0", "B1", "A2"], catalog, "W/tokenizer")
    check_sids_match(catalog, np.array(catalog), "W/tokenizer")
    with pytest.raises(ValueError, match="sids.npy: codes reach 9, but .*codebook_size is 8"):
        check_sids_match(catalog, catalog, "W/tokenizer", sids=np.full((3, 2), 9), codebook_size=8)
    # The collision level (last column) may count past the codebook size.
    check_sids_match(
        catalog, catalog, "W/tokenizer", sids=np.array([[1, 0], [1, 1], [1, 9]]), codebook_size=8
    )


def test_unknown_layout_and_bad_shapes_are_errors():
    with pytest.raises(ValueError, match="seqmodel.layout"):
        SeqModelConfig(layout="windows")
    with pytest.raises(ValueError, match="even width"):
        SeqModelConfig(d_model=12, num_heads=4)


_TWO_DEVICES = r"""
import jax, numpy as np, functools
from flax import nnx
from seqmodel import sharding
from seqmodel.state import TrainState, init_model, make_optimizer
from seqmodel.train import train_step
from seqmodel.tokens import TokenSpace, TokenizeExample, sid_tokens
from tests.seqmodel.test_train import CFG, _data, V
assert len(jax.devices()) == 2
data = _data()
space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=V)
tf = TokenizeExample(sid_tokens(data.sids, V), CFG.max_history, "causal")
ex = [tf.map({"items": data.train[u]}) for u in range(8)]
batch = {k: np.stack([e[k] for e in ex]) for k in ex[0]}
losses = []
for devices in (jax.devices()[:1], jax.devices()):
    mesh = sharding.make_mesh(devices)
    graphdef, params = nnx.split(init_model(CFG, space))
    tx = make_optimizer(CFG, 4)
    state = jax.device_put(TrainState(step=jax.numpy.zeros((), "int32"), params=params,
                           opt_state=tx.init(params)), sharding.replicated(mesh))
    step = jax.jit(functools.partial(train_step, graphdef, tx, 0))
    for _ in range(2):
        state, m = step(state, sharding.put_batch(batch, mesh))
    losses.append(float(m["loss"]))
    assert len(m["loss"].sharding.device_set) == len(devices)
print("LOSSES", losses)
np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
"""


@pytest.mark.slow
def test_two_forced_cpu_devices_give_the_loss_of_one():
    out = run_on_forced_cpu_devices(_TWO_DEVICES, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOSSES" in out.stdout


def test_pad_is_never_a_weighted_target():
    tok = sid_tokens(random_unique_sids(N, LEVELS, V), V)
    ex = TokenizeExample(tok, 4, "causal").map({"items": np.array([1, 2], np.int32)})
    assert (ex["targets"][ex["weights"] > 0] != PAD).all()


def test_beam_search_over_model_returns_allowed_sids_scored_by_the_full_forward():
    data = _data(fraction=0.25)
    space = TokenSpace(num_levels=LEVELS, codebook_size=V)
    model = init_model(CFG, space)
    allowed = data.sids[~data.allowed]  # decode into the cold set, as the evaluation does
    constraint = StaticConstraint(StaticIndex.build(allowed, vocab_size=V))
    tok = sid_tokens(data.sids, V)
    tokens = encode_histories(tok, data.valid_histories, CFG.max_history)
    res = retrieval_fn(model, jax.device_put(constraint), beam_size=4)(tokens)
    beams, scores, valid = map(np.asarray, (res.tokens, res.scores, res.valid))
    assert valid.all()
    allowed_rows = {tuple(r) for r in allowed}
    assert all(tuple(b) in allowed_rows for b in beams.reshape(-1, LEVELS))
    # Constrained scores are the model's own log-probs of the SID's tokens (renormalised by
    # nothing): recompute the top beam of row 0 with one full forward pass.
    seq = np.concatenate([tokens[0], sid_tokens(beams[0, :1], V)[0, :-1]])[None]
    logits = model(jnp.asarray(seq))[0, -LEVELS:]
    want = sum(float(jax.nn.log_softmax(logits[lv, lv])[beams[0, 0, lv]]) for lv in range(LEVELS))
    np.testing.assert_allclose(scores[0, 0], want, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.real_data
def test_no_cold_item_in_a_beauty_epoch(amazon_root, tmp_path):
    from data.config import DataConfig
    from data.prepared import load_prepared, prepare

    prepare(DataConfig(dataset="beauty"), amazon_root / "Beauty", tmp_path / "prepared")
    ds = load_prepared(tmp_path / "prepared")
    V4 = 256
    sids = random_unique_sids(len(ds.catalog), 4, V4)
    cfg = dataclasses.replace(CFG, max_history=20, eval_users=1000)
    data = cold_start_examples(
        ds, sids, codebook_size=V4, fraction=0.02, eval_users=cfg.eval_users, seed=cfg.seed
    )
    assert (~data.allowed).sum() >= 243  # the STATIC paper's Beauty 2% cold set (day ties add)
    tok = sid_tokens(sids, V4).astype(np.int64)
    key = lambda blocks: (blocks * V4 ** np.arange(3, -1, -1)).sum(-1)  # noqa: E731
    cold_keys = key(tok[~data.allowed] - 2)
    tf = TokenizeExample(sid_tokens(sids, V4), 20, "causal")
    users = 0
    for batch in batches(HistorySource(data.train), tf, batch_size=512, seed=0, num_epochs=1):
        # Every 4-token block after BOS is one item; PAD/BOS blocks are cut off by the mask.
        seq = np.concatenate([batch["inputs"], batch["targets"][:, -1:]], axis=1)[:, 1:]
        blocks = seq.reshape(len(seq), -1, 4).astype(np.int64)
        real = (blocks >= 2).all(-1)
        assert not np.isin(key(blocks[real] - 2), cold_keys).any()
        users += len(seq)
    assert users == len(data.train) // 512 * 512


def test_recall_at_k_counts_only_valid_beams_and_trims_padding():
    from decoding import BeamResult
    from seqmodel import sharding
    from seqmodel.inference import recall_at_k

    targets = np.arange(15, dtype=np.int32).reshape(5, 3)

    def fake_decode(params, tokens):
        rows = np.asarray(tokens)[:, 0]
        beams = np.zeros((len(rows), 2, 3), np.int32)
        beams[:, 1] = targets[rows]  # row r's second beam is its target...
        valid = np.ones((len(rows), 2), bool)
        valid[rows == 1, 1] = False  # ...but row 1's is invalid, so not a hit
        return BeamResult(*map(jnp.asarray, (beams, np.zeros((len(rows), 2), np.float32), valid)))

    tokens = np.arange(5, dtype=np.int32)[:, None]
    mesh = sharding.make_mesh(jax.devices()[:1])
    got = recall_at_k(fake_decode, None, tokens, targets, batch_size=2, mesh=mesh)
    assert got == pytest.approx(4 / 5)


def test_loo_data_validates_on_second_to_last_items_never_trained_on():
    ds = _dataset()
    cfg = dataclasses.replace(CFG, eval_users=10)
    data = loo_examples(
        ds,
        random_unique_sids(N, LEVELS, V),
        codebook_size=V,
        eval_users=cfg.eval_users,
        seed=cfg.seed,
    )
    h = ds.histories
    assert len(data.valid_targets) == 10 and data.allowed.all()
    second_last = {int(h[u][-2]) for u in range(len(h))}
    assert set(data.valid_targets.tolist()) <= second_last
    for u in range(len(h)):
        np.testing.assert_array_equal(data.train[u], h[u][:-2])
    for i in range(10):
        hist = data.valid_histories[i]
        owners = [u for u in range(len(h)) if np.array_equal(h[u][:-2], hist)]
        assert any(h[u][-2] == data.valid_targets[i] for u in owners)


@pytest.mark.slow
def test_a_stopped_run_goes_on_under_a_larger_patience_as_if_made_with_it(tmp_path, capsys):
    # A learning rate too small to move the holdout's beams: every validation after the first
    # is no gain, so patience 1 stops the run at the second one (step 4 of 8).
    still = dataclasses.replace(CFG, learning_rate=1e-12, max_steps=8, patience=1)
    data = _data()
    first = train_and_evaluate(still, tmp_path / "b", data, show_progress=False)
    assert first.summary["early_stopped"] and first.summary["steps"] == 4
    # Checkpoints keep the count of fruitless validations, not a stop flag. Older ones also held
    # "stopped": true, which a resume must not obey: add it to test that.
    stored = sorted((tmp_path / "b").glob("checkpoints/latest/*/progress/metadata"))
    assert stored
    for path in stored:
        progress = json.loads(path.read_text())
        assert set(progress) == {"best_recall", "best_step", "bad_evals"}, progress
        path.write_text(json.dumps({**progress, "stopped": True}))
    # The same run under patience 3: resumed (not retrained), and it equals a run made with 3.
    longer = dataclasses.replace(still, patience=3)
    resumed = train_and_evaluate(longer, tmp_path / "b", data, show_progress=False)
    said = capsys.readouterr().out
    assert "patience 1 -> 3; resuming the same run" in said and "retraining" not in said, said
    straight = train_and_evaluate(longer, tmp_path / "a", data, show_progress=False)
    assert resumed.summary["steps"] == straight.summary["steps"] == 8
    assert resumed.summary["early_stopped"] == straight.summary["early_stopped"]
    for a, b in zip(_params(straight), _params(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert _logged(tmp_path / "a") == _logged(tmp_path / "b")
    # Back to patience 1: the run's count of fruitless validations already stops it, no step.
    again = train_and_evaluate(still, tmp_path / "b", data, show_progress=False)
    assert again.summary["early_stopped"] and again.summary["steps"] == 8
    # Anything else that changes is still another run.
    other = dataclasses.replace(still, dropout=0.2)
    restarted = train_and_evaluate(other, tmp_path / "b", data, show_progress=False)
    assert restarted.summary["steps"] == 4
    assert "retraining it from scratch" in capsys.readouterr().out


def test_a_checkpoint_without_its_progress_record_is_one_line_naming_it(tmp_path):
    data = _data()
    train_and_evaluate(CFG, tmp_path, data, show_progress=False)
    stored = sorted(tmp_path.glob("checkpoints/latest/*/progress/metadata"))
    assert stored
    for path in stored:
        progress = json.loads(path.read_text())
        del progress["bad_evals"]
        path.write_text(json.dumps(progress))
    with pytest.raises(ArtifactError, match=r"latest/4: its progress record lacks bad_evals"):
        train_and_evaluate(CFG, tmp_path, data, show_progress=False)
