"""The rule of the house (docs/architecture.md): each room imports only what lies below it.

Every import in the package is read from its source, those inside functions included (the
commands import the library lazily), and checked against the table of rooms below, which is
the architecture page's drawing in code. A module that belongs to no room fails too, so a new
top-level module cannot slip in without its place on the page.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "minitransformer"
ARCHITECTURE_PAGE = PACKAGE.parent / "docs" / "architecture.md"

# room -> the module paths (dotted, below minitransformer) that make it up
ROOMS = {
    "engine": ("", "backend", "threads", "blas", "factories", "autograd", "functional", "nn",
               "optim"),
    "data": ("data",),
    "verify": ("verify",),
    "course": ("course",),
    "distributed": ("distributed",),
    "translation": ("translation",),
    "viz": ("viz",),
    "cli": ("cli", "__main__"),
    "files": ("files",),
}

# room -> the rooms it may import (its own included)
MAY_IMPORT = {
    "engine": {"engine"},
    "data": {"data", "files"},
    "verify": {"engine", "verify"},
    "course": {"engine", "verify", "course"},  # grading runs the finite-difference checker
    "distributed": {"engine", "distributed"},
    "translation": {"engine", "data", "distributed", "translation"},
    "viz": {"engine", "viz", "files"},
    "cli": set(ROOMS),
    "files": {"files"},
}

# inside the engine, each floor imports only its own floor and those below it
FLOORS = {"backend": 0, "autograd": 1, "functional": 2, "threads": 2, "blas": 2, "factories": 2,
          "nn": 3, "optim": 4, "": 5}
# the one import that runs upward: Tensor's operators call functional, as in every framework
UPWARD = {("autograd.tensor", "functional")}


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name below minitransformer ('' for the
    package itself, 'nn' for nn/__init__.py)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _inner(target: str) -> str:
    return target.removeprefix("minitransformer").lstrip(".")


def _imports(name: str) -> set[str]:
    """The package's modules that ``name`` imports, resolved to the longest module path."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                here = name.split(".") if name else []
                if not _is_package(name):
                    here = here[:-1]
                here = here[:len(here) - (node.level - 1)]
                module = ".".join(["minitransformer", *here, *([module] if module else [])])
            # `from .. import backend` imports a module; `from .. import no_grad`, a name
            targets = [f"{module}.{a.name}" if _inner(f"{module}.{a.name}") in MODULES
                       else module for a in node.names]
        else:
            continue
        for target in targets:
            if target == "minitransformer" or target.startswith("minitransformer."):
                inner = _inner(target)
                while inner and inner not in MODULES:
                    inner = inner.rpartition(".")[0]
                found.add(inner)
    found.discard(name)
    return found


def room_of(name: str) -> str | None:
    top = name.split(".")[0]
    for room, roots in ROOMS.items():
        if top in roots:
            return room
    return None


def _floor(name: str) -> int:
    return FLOORS[name.split(".")[0]]


def test_every_module_belongs_to_a_room():
    assert [name for name in MODULES if room_of(name) is None] == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_imports_only_the_rooms_below_it(name):
    room = room_of(name)
    wrong = sorted(target for target in _imports(name) if room_of(target) not in MAY_IMPORT[room])
    assert wrong == [], (f"minitransformer.{name} ({room}) imports {wrong}; the {room} room "
                         f"may import only {sorted(MAY_IMPORT[room])} (docs/architecture.md)")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if room_of(n) == "engine"))
def test_the_engine_is_built_floor_by_floor(name):
    upward = sorted(target for target in _imports(name)
                    if room_of(target) == "engine" and _floor(target) > _floor(name)
                    and (name, target) not in UPWARD)
    assert upward == [], f"minitransformer.{name} imports {upward}, a floor above its own"


def test_nothing_imports_the_command_line():
    users = sorted(name for name in MODULES if room_of(name) != "cli"
                   and any(room_of(target) == "cli" for target in _imports(name)))
    assert users == []


def test_a_command_shares_nothing_with_another_command():
    """What two commands need lives in the library, in cli/values.py (argument types) or in
    a helper module of the command line that is no command (cli/live.py, reading standard
    input as it arrives), never in a command's own module."""
    from minitransformer.cli import COMMANDS

    commands = {command.__name__.removeprefix("minitransformer.") for command in COMMANDS}
    assert "cli.translate" in commands and "cli.live" not in commands
    borrowed = {name: sorted(t for t in _imports(name) if t in commands)
                for name in commands}
    assert {name: targets for name, targets in borrowed.items() if targets} == {}


def test_the_rule_sees_imports_inside_functions_and_relative_ones():
    # cli/train.py imports the trainer inside run_train, two dots up
    assert "translation.training" in _imports("cli.train")
    # functional/attention.py: `from .. import backend`
    assert "backend" in _imports("functional.attention")
    # the one upward import is found (and then allowed by name, not by blindness)
    assert "functional" in _imports("autograd.tensor")


def test_the_architecture_page_names_every_room():
    page = ARCHITECTURE_PAGE.read_text(encoding="utf-8")
    missing = [root for roots in ROOMS.values() for root in roots
               if root and f"`{root}" not in page]
    assert missing == []
