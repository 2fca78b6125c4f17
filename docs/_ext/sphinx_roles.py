"""Griffe extension: the docstrings' Sphinx roles become mkdocstrings cross-references.

The package's docstrings name other objects the Sphinx way (``:func:`make_tree```,
``:class:`~gnn_treelstm.trees.schedule.LevelSchedule```, ``:mod:`.fused```). This
extension finds each name from the docstring's own scope, as Python would (the module's
imports included; then, for a package's docstring, its modules' members, and for a module's
docstring, its classes' members), and rewrites the role:

* to an autorefs link (``[`make_tree`][gnn_treelstm.trees.graph.make_tree]``) when the
  API reference shows the target (public, with a docstring, in a module that a ``:::`` line
  of ``docs/api/*.md`` renders), so the strict build fails if the link breaks;
* to plain code when the target exists but is not shown (a private helper, a command
  module, another library's function);
* and logs a warning, which fails ``mkdocs build --strict``, naming the docstring and the
  role when the name is nowhere: a reference to a renamed, moved or deleted object.
"""

from __future__ import annotations

import builtins
import importlib.util
import re
from pathlib import Path
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<kind>func|class|mod|data|attr|meth|exc|obj|const|type):`(?P<body>[^`]+)`"
)
API_PAGES = Path(__file__).resolve().parent.parent / "api"
ROOTS = ("gnn_treelstm",)

logger = griffe.get_logger(__name__)
Target = griffe.Object | griffe.Alias


def documented_modules() -> set[str]:
    """The modules that a ``::: module`` line of an API page renders."""
    found = set()
    for page in API_PAGES.glob("*.md"):
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("::: "):
                found.add(line[4:].strip())
    return found


def _final(target: Target) -> griffe.Object | None:
    try:
        return target.final_target if target.is_alias else target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


class SphinxRoles(griffe.Extension):
    """Rewrites ``:role:`target``` in every docstring of the loaded packages."""

    def __init__(self) -> None:
        super().__init__()
        self.documented = documented_modules()

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for root in ROOTS:
            if root not in loader.modules_collection:
                loader.load(root)
        self._walk(pkg, loader)

    def _walk(self, obj: griffe.Object, loader: griffe.GriffeLoader) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(
                lambda m: self._rewrite(obj, m, loader), obj.docstring.value
            )
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, loader)

    @staticmethod
    def _get(path: str, loader: griffe.GriffeLoader) -> Target | None:
        try:
            return loader.modules_collection.get_member(path)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None

    def _find(self, obj: griffe.Object, name: str, loader: griffe.GriffeLoader) -> Target | None:
        """The object ``name`` means in ``obj``'s docstring, or None."""
        module = obj.module
        if name.startswith("."):  # relative to the module's package, as an import would be
            dots = len(name) - len(name.lstrip("."))
            parts = module.path.split(".")
            parts = parts if module.is_init_module else parts[:-1]
            parts = parts[: len(parts) - (dots - 1)]
            return self._get(".".join([*parts, name.lstrip(".")]), loader)
        if (found := self._get(name, loader)) is not None:  # a full path
            return found
        head, _, tail = name.partition(".")
        scope: griffe.Object | None = obj
        while scope is not None:  # the docstring's scope, its imports included
            if scope.is_class and head in scope.all_members:  # a method naming a sibling
                member = scope.all_members[head]
                return self._get(f"{member.path}.{tail}", loader) if tail else member
            try:
                resolved = scope.resolve(head)
            except griffe.NameResolutionError:
                scope = scope.parent
                continue
            return self._get(f"{resolved}.{tail}" if tail else resolved, loader)
        # a package's docstring naming its modules' members, a module's naming its classes'
        owners = [m for m in module.modules.values()] if module.is_init_module else []
        owners += [c for c in module.classes.values() if not c.is_alias]
        hits = [o.all_members[head] for o in owners if head in o.all_members]
        hits = [h for h in hits if not h.is_alias or h.target_path.startswith(ROOTS)]
        canon = {(_final(h) or h).path for h in hits}
        if len(canon) == 1:
            return self._get(f"{hits[0].path}.{tail}" if tail else hits[0].path, loader)
        return None

    def _shown(self, target: Target) -> str | None:
        """The anchor of ``target`` in the API reference, or None when it is not shown."""
        final = _final(target)
        if final is None:
            return None
        path = final.path
        if any(part.startswith("_") for part in path.split(".")):
            return None  # the handler's filter "!^_"
        if final.is_module:
            return path if path in self.documented else None
        if final.module.path not in self.documented or not final.has_docstring:
            return None
        parent = final.parent
        while parent is not None and not parent.is_module:
            if not parent.has_docstring:
                return None
            parent = parent.parent
        return path

    @staticmethod
    def _external(name: str) -> bool:
        head = name.split(".", 1)[0]
        if not head or head in ROOTS:
            return False
        if "." not in name and hasattr(builtins, name):
            return True
        try:
            return importlib.util.find_spec(head) is not None
        except (ImportError, ValueError):
            return False

    def _rewrite(self, obj: griffe.Object, m: re.Match, loader: griffe.GriffeLoader) -> str:
        body = re.sub(r"\s+", " ", m.group("body")).strip()
        explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", body)  # :func:`t <x>`
        body = (explicit.group("target") if explicit else body).replace(" ", "")  # wrapped
        name = body.removeprefix("~").removesuffix("()")
        title = name.rsplit(".", 1)[-1] if body.startswith("~") else name
        if explicit:
            title = explicit.group("title")
        target = self._find(obj, name, loader)
        if target is not None:
            anchor = self._shown(target)
            return f"[`{title}`][{anchor}]" if anchor else f"`{title}`"
        if self._external(name):
            return f"`{title}`"
        logger.warning("%s: %s names %r, which is nowhere", obj.path, m.group(0), name)
        return f"`{title}`"
