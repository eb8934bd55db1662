"""Config tree: presets load (and the stages the single presets build), typed overrides, unknown
keys rejected, JSON round trip."""

import pytest

from experiments import config as config_lib
from experiments.pipeline.workflow import build_stages
from tests.experiments.helpers import keyed_layout


def test_every_preset_loads():
    for name in config_lib.preset_names():
        cfg = config_lib.load_preset(name)
        assert isinstance(cfg, config_lib.Config), name


@pytest.mark.parametrize("dataset", ["beauty", "toys", "sports"])
def test_leave_one_out_presets_are_what_was_measured_by_hand(dataset):
    """`D_item_cf` is `D_item` with the `--set` flags its runs were measured with (collaborative
    SIDs, dropout 0.3, the co-occurrence teacher, four seeds, the 10,000-user holdout, batch 64),
    and `D_item_cf_long` the same with six. Sports fits two retrievers in the budget and runs four
    as its `-long`. `D_single` is its first retriever alone, with the parameters' moving average,
    distilled from a teacher of the same config."""
    ensemble, long_ensemble = ("1", "1,2,3") if dataset == "sports" else ("1,2,3", "1,2,3,4,5")
    by_hand = config_lib.apply_overrides(
        config_lib.load_preset(f"{dataset}_item"),
        [
            "rqvae.cf_dim=64",
            "rqvae.codebook_size=256",
            "seqmodel.dropout=0.3",
            "seqmodel.cooc_distill=0.5",
            "seqmodel.eval_users=10000",
            "seqmodel.batch_size=64",
            "seqmodel.eval_every=342",
            f"eval.warm_ensemble_seeds={ensemble}",
            "eval.cold=false",
            "eval.warm_cooc_weight=0.5",
            "eval.warm_cooc_smoothing=100",
            f"name={dataset}_item_cf",
        ],
    )
    assert config_lib.load_preset(f"{dataset}_item_cf") == by_hand
    long = config_lib.apply_overrides(
        by_hand, [f"eval.warm_ensemble_seeds={long_ensemble}", f"name={dataset}_item_cf_long"]
    )
    assert config_lib.load_preset(f"{dataset}_item_cf_long") == long
    single = config_lib.apply_overrides(
        by_hand,
        [
            "eval.warm_ensemble_seeds=",
            "seqmodel.ema_decay=0.999",
            "seqmodel.self_distill=0.5",
            f"name={dataset}_single",
        ],
    )
    assert config_lib.load_preset(f"{dataset}_single") == single


@pytest.mark.parametrize("dataset", ["beauty", "toys", "sports"])
def test_single_presets_train_and_rank_one_retriever(tmp_path, dataset):
    layout = keyed_layout(tmp_path)
    cfg = config_lib.validate(config_lib.load_preset(f"{dataset}_single"))
    stages = build_stages(cfg, layout, progress=False)
    assert [s.name for s in stages] == ["tokenizer", "retriever_loo", "eval_warm"]


def test_typed_overrides():
    cfg = config_lib.load_preset("tiny")
    cfg = config_lib.apply_overrides(
        cfg,
        ["seqmodel.num_layers=3", "data.five_core=false", "eval.cold_start_fractions=0.1,0.2"],
    )
    assert cfg.seqmodel.num_layers == 3
    assert cfg.data.five_core is False
    assert cfg.eval.cold_start_fractions == (0.1, 0.2)


@pytest.mark.parametrize(
    "override, message",
    [
        ("seqmodel.num_layerz=3", "unknown config key"),
        ("seqmodel.num_layers=three", "expected int"),
        ("seqmodel=3", "is a group"),
        ("data.five_core=maybe", "expected true/false"),
        ("novalue", "expected key=value"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ValueError, match=message):
        config_lib.apply_overrides(config_lib.load_preset("tiny"), [override])


@pytest.mark.parametrize(
    "key, hint",
    [
        ("seqmodel.self_distil", "did you mean seqmodel.self_distill?"),
        ("seqmodel.beam", "the keys of seqmodel: arch, "),
        ("foo.bar", "keys start with one of: data, decode, eval"),
    ],
)
def test_an_unknown_key_gets_the_nearest_keys_or_its_groups(key, hint):
    with pytest.raises(ValueError, match="unknown config key") as e:
        config_lib.apply_overrides(config_lib.load_preset("tiny"), [f"{key}=1"])
    assert hint in str(e.value) and "\n" not in str(e.value)
    assert "sasrec.arch" not in str(e.value)  # not every key of every group


def test_json_round_trip(tmp_path):
    from data import atomic

    cfg = config_lib.apply_overrides(config_lib.load_preset("beauty"), ["rqvae.num_levels=4"])
    atomic.write_json(tmp_path / "c.json", config_lib.to_dict(cfg))
    assert config_lib.load_json(tmp_path / "c.json") == cfg


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        config_lib.load_preset("nope")


def test_ensemble_rule_is_checked_and_enters_the_leave_one_out_key_alone(tmp_path):
    import dataclasses

    from data.errors import ArgumentError
    from experiments.pipeline.layout import RunLayout
    from experiments.pipeline.workflow import build_stages

    cfg = config_lib.load_preset("tiny")
    with pytest.raises(ArgumentError, match="eval.warm_ensemble_rule='mean': one of"):
        config_lib.validate(config_lib.apply_overrides(cfg, ["eval.warm_ensemble_rule=mean"]))

    def keys(rule):
        c = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, warm_ensemble_rule=rule))
        return {s.name: s.key_parts for s in build_stages(c, RunLayout(tmp_path), progress=False)}

    product, mixture = keys("product"), keys("mixture")
    assert mixture["eval_warm"] != product["eval_warm"]
    assert all(mixture[n] == product[n] for n in product if n != "eval_warm")


@pytest.mark.parametrize("section", ["seqmodel", "parallel"])
def test_only_sasrec_takes_sampled_negatives(section):
    cfg = config_lib.apply_overrides(
        config_lib.load_preset("tiny"), [f"{section}.sampled_negatives=8"]
    )
    with pytest.raises(ValueError, match=f"{section}.sampled_negatives: only the sasrec section"):
        config_lib.validate(cfg)
    sasrec = config_lib.apply_overrides(
        config_lib.load_preset("tiny"), ["sasrec.sampled_negatives=8"]
    )
    assert config_lib.validate(sasrec).sasrec.sampled_negatives == 8
