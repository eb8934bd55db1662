"""Dataclass trees read back from JSON with their types checked, naming the key at fault."""

import dataclasses
import types
import typing


def _typed(value, tp, key: str):
    """`value` read from JSON as type `tp`, or ValueError naming `key` (JSON has no tuples, and a
    bool is not a number here: `"five_core": "no"` or `"num_layers": true` is refused)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _typed(value, args[0], key)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{key}: expected a list, got {value!r}")
        elem = typing.get_args(tp)[0]
        return tuple(_typed(v, elem, f"{key}[{i}]") for i, v in enumerate(value))
    if tp is bool and not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key}: expected a number, got {value!r}")
        return value  # an int stays one: the round trip keeps config.json's bytes and keys
    if tp is str and not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


def from_dict(cls: type, d: object, prefix: str = "", *, groups_required: bool = False):
    """Rebuilds a dataclass tree (an instance of cls) from dataclasses.asdict() output; unknown
    keys and values of the wrong type raise ValueError naming the key, and so does a missing
    group (a dataclass-typed field) where `groups_required`."""
    if not isinstance(d, dict):
        raise ValueError(f"{prefix.rstrip('.') or 'config'}: expected an object, got {d!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown config keys for {cls.__name__}: {sorted(unknown)}")
    # A config.json written by this version has every group; a missing one would silently take
    # the defaults (a field added since may be missing: it takes its default).
    missing = [n for n in names - set(d) if dataclasses.is_dataclass(hints[n])]
    if missing and groups_required:
        raise ValueError(f"missing group {', '.join(prefix + n for n in sorted(missing))}")
    kwargs = {}
    for name, value in d.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(tp, value, f"{prefix}{name}.", groups_required=groups_required)
        else:
            kwargs[name] = _typed(value, tp, prefix + name)
    return cls(**kwargs)
