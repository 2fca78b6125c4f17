"""Tiny name -> object registries (``cells``, ``tasks``) that fail loudly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "UnknownNameError"]


class UnknownNameError(KeyError, ValueError):
    """An unknown registry name; the message lists the valid choices."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to objects; an unknown name raises ``KeyError`` listing the choices."""

    def __init__(self, kind: str, loader: Callable[[str], None] | None = None) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        #: called with a name not registered yet, before :meth:`get` gives up: it may
        #: register the name (e.g. from an installed package's entry point)
        self._loader = loader

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> T:
        return self.register(name)(obj)

    def get(self, name: str) -> T:
        if name not in self._items and self._loader is not None:
            self._loader(name)
        try:
            return self._items[name]
        except KeyError:
            choices = ", ".join(sorted(self._items))
            msg = f"unknown {self.kind} {name!r}; choose one of: {choices}"
            raise UnknownNameError(msg) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
