"""Word vocabulary: ``itos`` (id -> token), ``stoi`` (token -> id), unknown id 0.

Saved as a JSON list of tokens (the id of a token is its index), which is the
``DIR/vocab.json`` file of a built data set (see ``docs/design.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from gnn_treelstm.files import atomic_write

__all__ = ["Vocab", "Relations", "UNK_TOKEN", "fingerprint"]


def fingerprint(names: Iterable[str]) -> str:
    """12 hex digits identifying an ordered list of names (a vocabulary, a relation set):
    equal fingerprints mean the same id for every name."""
    return hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()[:12]

UNK_TOKEN = "<unk>"


class Vocab:
    """A token <-> id mapping with the unknown token at id 0.

    Tokens are kept as-is (cased). Looking up a token that is not in the vocabulary
    gives :attr:`unk` (0).
    """

    unk: int = 0

    def __init__(self, tokens: Iterable[str] = (), *, unk_token: str = UNK_TOKEN) -> None:
        self.unk_token = unk_token
        self.itos: list[str] = [unk_token]
        self.stoi: dict[str, int] = {unk_token: 0}
        for tok in tokens:
            self.add(tok)

    def add(self, token: str) -> int:
        """Add ``token`` if new; return its id."""
        if not isinstance(token, str):
            raise ValueError(f"Vocab.add: tokens must be str, got {type(token).__name__}")
        idx = self.stoi.get(token)
        if idx is None:
            idx = len(self.itos)
            self.itos.append(token)
            self.stoi[token] = idx
        return idx

    def update(self, tokens: Iterable[str]) -> None:
        for tok in tokens:
            self.add(tok)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __iter__(self) -> Iterator[str]:
        return iter(self.itos)

    def __getitem__(self, token: str) -> int:
        """Id of ``token``, :attr:`unk` if unknown."""
        return self.stoi.get(token, self.unk)

    def lookup(self, tokens: Iterable[str]) -> list[int]:
        """Ids of ``tokens`` (unknown tokens map to :attr:`unk`)."""
        get, unk = self.stoi.get, self.unk
        return [get(t, unk) for t in tokens]

    def token(self, idx: int) -> str:
        """The token with id ``idx``."""
        if not 0 <= idx < len(self.itos):
            raise ValueError(f"Vocab.token: id {idx} out of range [0, {len(self.itos)})")
        return self.itos[idx]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, unk_token={self.unk_token!r})"

    def save(self, path: str | os.PathLike) -> None:
        """Write the token list as JSON (atomically: :func:`~gnn_treelstm.files.atomic_write`)."""
        atomic_write(path, json.dumps(self.itos, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read a vocabulary written by :meth:`save` (a JSON list, index 0 = unknown)."""
        path = Path(path)
        try:
            itos = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a JSON vocabulary list ({e})") from None
        if not isinstance(itos, list) or not itos or not all(isinstance(t, str) for t in itos):
            raise ValueError(f"{path}: expected a non-empty JSON list of strings")
        if len(set(itos)) != len(itos):
            raise ValueError(f"{path}: duplicate tokens in vocabulary")
        vocab = cls(unk_token=itos[0])
        vocab.update(itos[1:])
        return vocab


class Relations:
    """A relation vocabulary (no unknown entry): ``names[id]``, ``ids[name]``.

    Dependency trees grow it as labels are seen (:meth:`id` with ``add=True``);
    constituency trees use the fixed ``["left", "right"]`` (id = child position).
    Saved as ``DIR/relations/<tree>.json``, a JSON list of names.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.ids: dict[str, int] = {}
        for name in names:
            self.id(name)

    def id(self, name: str, *, add: bool = True) -> int:
        """Id of relation ``name``; new names are appended when ``add`` else raise."""
        idx = self.ids.get(name)
        if idx is None:
            if not add:
                known = ", ".join(self.names)
                raise ValueError(f"unknown relation {name!r}; known relations: {known}")
            idx = len(self.names)
            self.names.append(name)
            self.ids[name] = idx
        return idx

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Relations) and self.names == other.names

    def __repr__(self) -> str:
        return f"Relations({self.names!r})"

    def save(self, path: str | os.PathLike) -> None:
        """Write the names as JSON (atomically)."""
        atomic_write(path, json.dumps(self.names, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Relations:
        path = Path(path)
        names = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
            raise ValueError(f"{path}: expected a JSON list of relation names")
        return cls(names)
