"""The prepared dataset: a TFDS builder writing array_record files, keyed by raw content+config."""

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import tqdm_utils

from data import amazon, atomic, interactions, synthetic
from data.config import DataConfig, amazon_category
from data.fingerprint import FINGERPRINT_VERSION
from data.types import Catalog, Histories, InteractionData

# Bump when the record layout or the reader's semantics change: old prepared folders are rebuilt.
FORMAT_VERSION = 1
BUILDER_NAME = "genret_interactions"
KEY_FILE = "prepared.json"
_read_cache: dict[tuple, InteractionData] = {}


def _read(raw_dir: Path, cfg: DataConfig, key: str) -> InteractionData:
    """Reads the raw folder once per key: the users and items configs share one read."""
    cache_key = (str(raw_dir), cfg, key)
    if cache_key not in _read_cache:
        _read_cache.clear()
        _read_cache[cache_key] = read_raw(cfg, raw_dir)
    return _read_cache[cache_key]


def raw_files(cfg: DataConfig, raw_dir: Path) -> list[Path]:
    """The files in raw_dir that cfg.dataset reads; they and cfg make the content key."""
    amazon_category(cfg)  # raises where data.category does not fit data.dataset
    if cfg.dataset == "interactions":
        return [p for p in interactions.find_raw_files(raw_dir) if p is not None]
    # A shortcut (beauty, ...) without data.category reads the folder's only category, as before.
    return list(amazon.find_raw_files(raw_dir, cfg.category))


def read_raw(cfg: DataConfig, raw_dir: Path) -> InteractionData:
    """Reads the files of raw_files(cfg, raw_dir) into an InteractionData."""
    amazon_category(cfg)
    options = dict(five_core=cfg.five_core, skip_bad_lines=cfg.skip_bad_lines)
    if cfg.dataset == "interactions":
        return interactions.read_raw_dir(raw_dir, **options)
    return amazon.read_raw_dir(raw_dir, category=cfg.category, **options)


class GenretInteractions(tfds.core.GeneratorBasedBuilder):
    """Per-user histories (config "users") and the item catalog (config "items") of one dataset."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [
        tfds.core.BuilderConfig(name="users", description="one record per user"),
        tfds.core.BuilderConfig(name="items", description="one record per catalog item"),
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "The folder holding reviews_<Cat>_5.json[.gz] and meta_<Cat>.json[.gz], or "
        "interactions.csv and items.csv."
    )

    def __init__(self, *, read_options: dict | None = None, **kwargs):
        self._read_options = read_options or {}
        super().__init__(**kwargs)

    # TFDS prints "Downloading and preparing dataset ... to <temporary folder>" and "downloaded and
    # prepared" on stdout: nothing is downloaded here and the folder is renamed afterwards, so the
    # lines would mislead. The pipeline's own "[prepare]" line says what happens.
    def _log_download_bytes(self) -> None:
        pass

    def _log_download_done(self) -> None:
        pass

    def _info(self) -> tfds.core.DatasetInfo:
        if self.builder_config.name == "users":
            features = {
                "user": tfds.features.Scalar(np.int32),
                "user_id": tfds.features.Text(),
                "items": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                "times": tfds.features.Tensor(shape=(None,), dtype=np.int64),
            }
        else:
            features = {
                "item": tfds.features.Scalar(np.int32),
                "asin": tfds.features.Text(),
                "text": tfds.features.Text(),
                "leaf_category": tfds.features.Text(),
                "first_time": tfds.features.Scalar(np.int64),
            }
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features))

    def _split_generators(self, dl_manager):
        ds = _read(Path(dl_manager.manual_dir), **self._read_options)
        return {"train": self._generate_examples(ds)}

    def _generate_examples(self, ds: InteractionData):
        # Records are shuffled by key on disk, so each carries its own index.
        if self.builder_config.name == "users":
            h = ds.histories
            for u, uid in enumerate(ds.user_ids.tolist()):
                yield u, {"user": u, "user_id": uid, "items": h[u], "times": h.times_of(u)}
        else:
            c = ds.catalog
            for i, asin in enumerate(c.asins.tolist()):
                yield (
                    i,
                    {
                        "item": i,
                        "asin": asin,
                        "text": c.texts[i],
                        "leaf_category": c.leaf_categories[i],
                        "first_time": c.first_time[i],
                    },
                )


def content_key(cfg: DataConfig, files: list[Path]) -> str:
    """sha256 over the raw files' names and bytes and the config fields that shape the data."""
    h = hashlib.sha256(f"genret-prepared-v{FORMAT_VERSION}-k{FINGERPRINT_VERSION}\n".encode())
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("raw_dir", "seed")}
    h.update(json.dumps(fields, sort_keys=True).encode())
    for path in sorted(files, key=lambda p: p.name):
        h.update(f"\n{path.name}\n".encode())
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def resolve_raw_dir(
    cfg: DataConfig, raw_dir: Path | None, out_dir: Path, *, progress: bool = True
) -> Path:
    """The raw folder; for the synthetic dataset, generated beside out_dir (W/raw) if needed."""
    if raw_dir is None and cfg.raw_dir:
        raw_dir = Path(cfg.raw_dir)
    if cfg.dataset == "synthetic":
        raw_dir = raw_dir or Path(out_dir).parent / "raw"
        synthetic.ensure_raw_files(cfg.synthetic, raw_dir, progress=progress)
    elif raw_dir is None:
        raise ValueError(f"dataset {cfg.dataset!r}: no raw folder given (--raw-dir)")
    return Path(raw_dir)


def stored_key(out_dir: Path) -> str | None:
    """The content key of the prepared dataset in out_dir (None when there is none): what its
    records hold, where the files' bytes are not fixed (two writes of the same records differ
    in the order each example's features are serialized)."""
    try:
        return json.loads((Path(out_dir) / KEY_FILE).read_text())["key"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        return None


def is_prepared(out_dir: Path, key: str) -> bool:
    """Whether out_dir holds a complete prepared dataset with this content key."""
    return stored_key(out_dir) == key


def prepare(cfg: DataConfig, raw_dir: Path | None, out_dir: Path, *, progress: bool = True) -> Path:
    """Writes the prepared dataset to out_dir unless one with the same content key is there
    (progress: whether the synthetic generator and TFDS show their progress bars)."""
    out_dir = Path(out_dir)
    raw_dir = resolve_raw_dir(cfg, raw_dir, out_dir, progress=progress)
    files = raw_files(cfg, raw_dir)
    key = content_key(cfg, files)
    if is_prepared(out_dir, key):
        return out_dir
    options = dict(cfg=cfg, key=key)
    # TFDS keeps one global switch for its bars; set it for this write and put it back.
    shown = getattr(tqdm_utils, "_active", True)
    tfds.display_progress_bar(progress and shown)
    try:
        _write(out_dir, raw_dir, files, cfg, key, options)
    finally:
        _read_cache.clear()
        tfds.display_progress_bar(shown)
    return out_dir


def _write(out_dir: Path, raw_dir: Path, files: list[Path], cfg: DataConfig, key: str, options):
    with atomic.atomic_dir(out_dir) as tmp:
        for name in ("users", "items"):
            builder = GenretInteractions(
                config=name,
                data_dir=os.fspath(tmp / "tfds"),
                read_options=options,
                file_format="array_record",
            )
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(manual_dir=os.fspath(raw_dir)),
            )
        ds = _read(raw_dir, **options)
        atomic.write_json(tmp / "report.json", ds.report)
        atomic.write_json(
            tmp / KEY_FILE,
            {
                "key": key,
                "name": ds.name,
                "raw_files": [os.fspath(p) for p in files],
                "config": dataclasses.asdict(cfg),
            },
        )


def data_source(out_dir: Path, config: str = "users"):
    """The prepared records as a random-access tfds data source (usable by grain.MapDataset)."""
    out_dir = Path(out_dir)
    if not (out_dir / KEY_FILE).is_file():
        raise FileNotFoundError(f"{out_dir}: no prepared dataset here; run `genret prepare` first")
    if config not in ("users", "items"):
        raise ValueError(f"config must be 'users' or 'items', got {config!r}")
    path = os.fspath(out_dir / "tfds")
    return tfds.data_source(f"{BUILDER_NAME}/{config}", data_dir=path)["train"]


def _records(out_dir: Path, config: str) -> list[dict]:
    source = data_source(out_dir, config)
    return source.__getitems__(list(range(len(source))))


def _indexed(records: list, field: str, what: str) -> list[dict]:
    """`records` sorted by their `field`, which must number them 0..n-1 (a truncated record
    file reads back with missing or None records): else a ValueError."""
    try:
        records = sorted(records, key=lambda r: int(r[field]))
    except (TypeError, KeyError, ValueError):  # a record or its index read back as None
        raise ValueError(f"unreadable {what} records") from None
    if [int(r[field]) for r in records] != list(range(len(records))):
        raise ValueError(f"the {what} records are not numbered 0..{len(records) - 1}")
    return records


def load_prepared(out_dir: Path) -> InteractionData:
    """Reads a prepared folder back into an InteractionData (records re-ordered by index)."""
    out_dir = Path(out_dir)
    users = _indexed(_records(out_dir, "users"), "user", "user")
    items = _indexed(_records(out_dir, "items"), "item", "item")
    meta = json.loads((out_dir / KEY_FILE).read_text())
    lengths = np.array([len(r["items"]) for r in users], np.int64)
    histories = Histories(
        items=np.concatenate([r["items"] for r in users]).astype(np.int32),
        times=np.concatenate([r["times"] for r in users]).astype(np.int64),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    )
    catalog = Catalog(
        asins=np.array([r["asin"].decode() for r in items]),
        texts=[r["text"].decode() for r in items],
        leaf_categories=[r["leaf_category"].decode() for r in items],
        first_time=np.array([r["first_time"] for r in items], np.int64),
    )
    return InteractionData(
        name=meta["name"],
        user_ids=np.array([r["user_id"].decode() for r in users]),
        catalog=catalog,
        histories=histories,
        report=json.loads((out_dir / "report.json").read_text()),
    )
