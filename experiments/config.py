"""The root config tree, preset loading, typed `--set key=value` overrides and JSON round trips."""

import dataclasses
import importlib
import json
import pkgutil
import types
import typing
from pathlib import Path

from data.config import DataConfig
from decoding.config import DecodeConfig
from rqvae.config import RQVAEConfig
from seqmodel.config import SeqModelConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """What the evaluations run: cold-start fractions, beam width, test-user cap."""

    cold_start_fractions: tuple[float, ...] = (0.02, 0.05)
    beam_size: int = 20
    max_test_users: int = 0  # 0: all
    # Cold-start beam scores (decoding.scoring.prior_correction), unconstrained and STATIC alike:
    # subtract this multiple of the training log prior of the first two codes, and weight each
    # level's log-prob (empty: 1 at every level). Plain STATIC is also reported when either is set.
    cold_prior_weight: float = 0.0
    cold_level_weights: tuple[float, ...] = ()
    warm: bool = True  # the pipeline also trains a leave-one-out retriever and runs eval-warm
    seed: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Everything one run needs; saved as config.json in the work directory."""

    name: str = "synthetic"
    seed: int = 0
    data: DataConfig = DataConfig()
    rqvae: RQVAEConfig = RQVAEConfig()
    seqmodel: SeqModelConfig = SeqModelConfig()
    decode: DecodeConfig = DecodeConfig()
    eval: EvalConfig = EvalConfig()


def preset_names() -> list[str]:
    import experiments.configs as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def load_preset(name: str) -> Config:
    """Returns `experiments/configs/<name>.py`'s get_config()."""
    names = preset_names()
    if name not in names:
        raise ValueError(f"--config: unknown preset {name!r}; choose from {', '.join(names)}")
    return importlib.import_module(f"experiments.configs.{name}").get_config()


def _parse_value(text: str, tp, key: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if text.lower() in ("none", "null") and len(args) < len(typing.get_args(tp)):
            return None
        return _parse_value(text, args[0], key)
    if origin is tuple:
        (elem, *rest) = typing.get_args(tp)
        parts = [p for p in text.strip("()[] ").split(",") if p.strip()]
        return tuple(_parse_value(p.strip(), elem, key) for p in parts)
    if tp is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--set {key}: expected true/false, got {text!r}")
    if tp in (int, float):
        try:
            return tp(text)
        except ValueError:
            raise ValueError(f"--set {key}: expected {tp.__name__}, got {text!r}") from None
    if tp is str:
        return text
    raise ValueError(f"--set {key}: fields of type {tp} cannot be set from the command line")


def _field_paths(cfg, prefix="") -> list[str]:
    out = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _field_paths(value, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def _replace_path(cfg, parts: list[str], text: str, key: str):
    hints = typing.get_type_hints(type(cfg))
    name = parts[0]
    if name not in hints or name not in {f.name for f in dataclasses.fields(cfg)}:
        raise KeyError(name)
    current = getattr(cfg, name)
    if len(parts) == 1:
        if dataclasses.is_dataclass(current):
            raise ValueError(f"--set {key}: is a group; set one of its fields")
        return dataclasses.replace(cfg, **{name: _parse_value(text, hints[name], key)})
    if not dataclasses.is_dataclass(current):
        raise KeyError(name)
    return dataclasses.replace(cfg, **{name: _replace_path(current, parts[1:], text, key)})


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    """Applies `a.b=value` strings; unknown keys and badly typed values raise ValueError."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected key=value, e.g. seqmodel.num_layers=4")
        key, text = item.split("=", 1)
        key = key.strip()
        try:
            cfg = _replace_path(cfg, key.split("."), text.strip(), key)
        except KeyError:
            known = ", ".join(_field_paths(cfg))
            raise ValueError(f"--set {key}: unknown config key; known keys: {known}") from None
    return cfg


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(cls, d: dict):
    """Rebuilds a dataclass tree from to_dict() output; unknown keys raise ValueError."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown config keys for {cls.__name__}: {sorted(unknown)}")
    kwargs = {}
    for name, value in d.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(tp, value)
        elif typing.get_origin(tp) is tuple:
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def load_json(path: str | Path) -> Config:
    return from_dict(Config, json.loads(Path(path).read_text()))
