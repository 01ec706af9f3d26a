"""Frozen records: immutable value classes for the AST, the checked program and the IR.

They behave like `@dataclass(frozen=True, slots=True)` (positional and keyword
construction, defaults, `__post_init__`, equality, hashing, repr, pattern matching, pickling),
but are built without generating and compiling code per class. `dataclasses`
spends about half a millisecond on each class at import time; the front end
has dozens of node classes, and `bamasc lint` must start in a few times the
interpreter's own start-up.
"""

from __future__ import annotations


class FrozenRecordError(AttributeError):
    """Raised on an attempt to assign to a field of a record."""


def record(cls: type) -> type:
    """Turn a class with annotated fields (optionally with defaults) into a frozen record."""
    names = tuple(cls.__dict__.get("__annotations__", {}))
    defaults = {}
    namespace = {}
    for key, value in cls.__dict__.items():
        if key in names:
            defaults[key] = value
        elif key not in ("__dict__", "__weakref__"):
            namespace[key] = value
    namespace.update(
        __slots__=names,
        __match_args__=names,
        __record_fields__=names,
        __record_defaults__=defaults,
        # A record that checks itself does so on every construction, `replace` included.
        __init__=_init_checked if "__post_init__" in namespace else _init,
        __eq__=_eq,
        __hash__=_hash,
        __repr__=_repr,
        __setattr__=_setattr,
        __delattr__=_delattr,
        __reduce__=_reduce,
    )
    return type(cls)(cls.__name__, cls.__bases__, namespace)


# The methods are shared by every record class and read the field names from
# the class, so defining a record costs one `type()` call.

_set = object.__setattr__


def _init(self, *args, **kwargs):
    cls = self.__class__
    names = cls.__record_fields__
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} arguments, got {len(args)}")
    for name, value in zip(names, args):
        _set(self, name, value)
    if len(args) < len(names):
        defaults = cls.__record_defaults__
        for name in names[len(args):]:
            if name in kwargs:
                _set(self, name, kwargs.pop(name))
            elif name in defaults:
                _set(self, name, defaults[name])
            else:
                raise TypeError(f"{cls.__name__}() missing argument '{name}'")
    if kwargs:
        raise TypeError(f"{cls.__name__}() got unexpected arguments: {', '.join(kwargs)}")


def _init_checked(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.__post_init__()


def _values(self) -> tuple:
    return tuple(getattr(self, name) for name in self.__record_fields__)


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self):
    return hash((self.__class__.__name__,) + _values(self))


def _repr(self):
    fields_text = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_fields__)
    return f"{self.__class__.__name__}({fields_text})"


def _setattr(self, name, value):
    raise FrozenRecordError(f"cannot assign to field '{name}' of a frozen {self.__class__.__name__}")


def _delattr(self, name):
    raise FrozenRecordError(f"cannot delete field '{name}' of a frozen {self.__class__.__name__}")


def _reduce(self):
    return (self.__class__, _values(self))


def fields(instance) -> tuple[str, ...]:
    return instance.__record_fields__


def replace(instance, **changes):
    """A copy of `instance` with some fields changed."""
    values = {name: getattr(instance, name) for name in instance.__record_fields__}
    values.update(changes)
    return type(instance)(**values)


def as_dict(instance) -> dict:
    return {name: getattr(instance, name) for name in instance.__record_fields__}
