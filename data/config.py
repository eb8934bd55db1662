"""Configuration of the data layer: which dataset, where its raw files are, how it is filtered."""

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyntheticConfig:
    """Size and seed of the generated catalog (the embedded default dataset)."""

    num_items: int = 6000
    num_users: int = 12000
    num_categories: int = 24
    seed: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Dataset choice and reading options."""

    dataset: str = "synthetic"  # synthetic | beauty | sports | toys
    raw_dir: str = ""  # empty: the dataset's default location
    five_core: bool = True
    skip_bad_lines: bool = False
    synthetic: SyntheticConfig = SyntheticConfig()
    seed: int = 0
