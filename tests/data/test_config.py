"""Tests of data/config.py: accepted datasets and the Amazon category a config names."""

import dataclasses

import pytest

from data.config import DATASETS, DataConfig, amazon_category


def test_unknown_dataset_is_an_error():
    assert set(DATASETS) >= {"synthetic", "beauty", "sports", "toys", "amazon2014", "interactions"}
    with pytest.raises(ValueError, match="data.dataset='beuaty': expected one of synthetic"):
        DataConfig(dataset="beuaty")


def test_amazon_category_of_shortcuts_and_amazon2014():
    assert amazon_category(DataConfig(dataset="beauty")) == "Beauty"
    assert amazon_category(DataConfig(dataset="sports", category="Sports_and_Outdoors")) == (
        "Sports_and_Outdoors"
    )
    cfg = DataConfig(dataset="amazon2014", category="Cell_Phones_and_Accessories")
    assert amazon_category(cfg) == "Cell_Phones_and_Accessories"
    assert amazon_category(DataConfig(dataset="amazon2014")) == ""
    assert amazon_category(DataConfig()) == ""
    with pytest.raises(ValueError, match="contradicts dataset 'toys'"):
        amazon_category(DataConfig(dataset="toys", category="Beauty"))
    for dataset in ("synthetic", "interactions"):
        with pytest.raises(ValueError, match=f"applies to dataset amazon2014, not '{dataset}'"):
            amazon_category(DataConfig(dataset=dataset, category="Beauty"))


def test_category_defaults_to_empty():
    assert {f.name: f.default for f in dataclasses.fields(DataConfig)}["category"] == ""
