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
        __init__=_init_first,
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
_MISSING = object()


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


COMPILE_AFTER = 16
"""Constructions of a class by the generic `_init` before it compiles its own (`_compiled`)."""

_constructed: dict[type, int] = {}


def _init_first(self, *args, **kwargs):
    """The generic constructor, until a class has been constructed COMPILE_AFTER times: it then
    compiles its own `__init__` (`_compiled`) and uses that from then on. Constructing records is
    most of what building a template's MILP does in Python, and the generic `_init` takes about
    five times as long. Compiling costs about as much as 40 generic constructions, so a class made
    only a few times never pays for it: compiling at once made a first `lint` of examples/gsm8k.bam
    (load and check, in process) take 10.4 ms instead of 8.0; after 16 it takes 7.7 ms, and the
    warm compile of that file gains as much as compiling at once (about 26 to 24 ms)."""
    cls = self.__class__
    seen = _constructed.get(cls, 0) + 1
    if seen < COMPILE_AFTER:
        _constructed[cls] = seen
        _init(self, *args, **kwargs)
        if hasattr(cls, "__post_init__"):
            self.__post_init__()
        return
    init = _compiled(cls)
    cls.__init__ = init
    init(self, *args, **kwargs)


def _compiled(cls):
    """`__init__` for one record class: each field a parameter (with its default), set in order."""
    names = cls.__record_fields__
    checked = hasattr(cls, "__post_init__")
    if not all(name.isidentifier() and not name.startswith("_r_") and name != "self" for name in names):
        return _init_checked if checked else _init
    defaults = cls.__record_defaults__
    # A field without a default may follow one with a default (as `_init` allows): it gets a
    # marker default, and a missing argument is refused as `_init` refuses it.
    first = next((i for i, name in enumerate(names) if name in defaults), len(names))
    required = [name for name in names[first:] if name not in defaults]
    parameters = ", ".join(
        name if i < first else f"{name}=_r_default_{name}" if name in defaults else f"{name}=_r_missing"
        for i, name in enumerate(names)
    )
    body = "".join(
        f"    if {name} is _r_missing:\n        raise TypeError({f'{cls.__name__}() missing argument {name!r}'!r})\n"
        for name in required
    )
    body += "".join(f"    _r_set(self, {name!r}, {name})\n" for name in names)
    body += "    self.__post_init__()\n" if checked else ""
    scope = {"_r_set": _set, "_r_missing": _MISSING, **{f"_r_default_{name}": value for name, value in defaults.items()}}
    exec(f"def __init__(self, {parameters}):\n{body or '    pass'}\n", scope)  # noqa: S102 (code of field names only)
    init = scope["__init__"]
    init.__qualname__ = cls.__name__
    return init


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
