"""A trained model's JSON description read back with its types checked."""

import dataclasses
import json

import pytest

from data.errors import ArtifactError
from seqmodel.config import SeqModelConfig
from seqmodel.inference import read_description


def _info(**changes) -> dict:
    info = {
        "seqmodel": dataclasses.asdict(SeqModelConfig()),
        "num_levels": 4,
        "codebook_size": 8,
    }
    info.update(changes)
    return info


def test_a_good_description_reads_back(tmp_path):
    (tmp_path / "retriever.json").write_text(json.dumps(_info()))
    _, cfg, space = read_description(tmp_path / "retriever.json", "retriever", "train-retriever")
    assert cfg == SeqModelConfig() and space.num_levels == 4 and space.codebook_size == 8


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_levels": "four"}, "num_levels"),
        ({"codebook_size": 8.5}, "codebook_size"),
        ({"num_levels": True}, "num_levels"),
        ({"seqmodel": {**dataclasses.asdict(SeqModelConfig()), "num_layers": "2"}}, "num_layers"),
        ({"seqmodel": [1, 2]}, "seqmodel"),
    ],
    ids=["str-levels", "float-codebook", "bool-levels", "str-layers", "list-seqmodel"],
)
def test_a_wrong_typed_field_is_an_artifact_error_naming_file_and_field(tmp_path, changes, field):
    path = tmp_path / "retriever.json"
    path.write_text(json.dumps(_info(**changes)))
    with pytest.raises(ArtifactError) as e:
        read_description(path, "retriever", "train-retriever")
    assert str(path) in str(e.value) and field in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
