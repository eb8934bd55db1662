"""Configuration of the data layer: which dataset, where its raw files are, how it is filtered."""

import dataclasses

from data.errors import ArgumentError

# Shortcuts for categories of the Amazon Reviews 2014 release (the published benchmarks).
AMAZON_SHORTCUTS = {
    "beauty": "Beauty",
    "sports": "Sports_and_Outdoors",
    "toys": "Toys_and_Games",
}
# synthetic: generated; amazon2014 (and its shortcuts): reviews_<Cat>_5 + meta_<Cat> files;
# interactions: your own interactions.csv (+ items.csv), see data/interactions.py.
DATASETS = ("synthetic", *AMAZON_SHORTCUTS, "amazon2014", "interactions")


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

    dataset: str = "synthetic"  # one of DATASETS
    # amazon2014 (or a shortcut): the <Cat> of reviews_<Cat>_5.json[.gz], e.g. Beauty or
    # Cell_Phones_and_Accessories; "": the only category in the raw folder.
    category: str = ""
    raw_dir: str = ""  # empty: the dataset's default location
    five_core: bool = True
    skip_bad_lines: bool = False
    synthetic: SyntheticConfig = SyntheticConfig()
    seed: int = 0

    def __post_init__(self):
        if self.dataset not in DATASETS:
            choices = ", ".join(DATASETS)
            raise ArgumentError(f"data.dataset={self.dataset!r}: expected one of {choices}")


def amazon_category(cfg: DataConfig) -> str:
    """The Amazon 2014 category cfg names: data.category, else its shortcut's; "" when neither.

    Raises ArgumentError where data.category contradicts the shortcut or the dataset has none.
    """
    shortcut = AMAZON_SHORTCUTS.get(cfg.dataset, "")
    if cfg.category and cfg.dataset not in (*AMAZON_SHORTCUTS, "amazon2014"):
        raise ArgumentError(
            f"data.category={cfg.category!r} applies to dataset amazon2014, not {cfg.dataset!r}"
        )
    if shortcut and cfg.category not in ("", shortcut):
        raise ArgumentError(
            f"data.category={cfg.category!r} contradicts dataset {cfg.dataset!r} ({shortcut}); "
            "use dataset amazon2014 for other categories"
        )
    return cfg.category or shortcut
