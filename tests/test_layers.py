"""The packages' layering, read from their sources: dependencies run one way (toolkit -> launcher, toolkit ->
compare; the launcher and compare stand alone), and no module imports one that imports it back, whether the import
is at the top, inside a function or only for typing."""

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGES = {"opentc_launcher": REPO / "launcher" / "src", "opentc_toolkit": REPO / "toolkit" / "src",
            "opentc_compare": REPO / "compare" / "src"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every module of ours that `path` (module `name`) imports, anywhere in it. `from package import x` counts
    package.x where x is one of `modules`, else the package (x is a name defined in its __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    modules = {}
    for root in PACKAGES.values():
        for path in root.rglob("*.py"):
            modules[module_name(path, root)] = path
    names = set(modules)
    return {name: {m for m in imports(path, name, names) if m in modules and m != name}
            for name, path in modules.items()}


def test_the_launcher_and_compare_stand_alone():
    for name, targets in graph().items():
        top = name.split(".")[0]
        if top == "opentc_launcher":
            assert not {t for t in targets if not t.startswith("opentc_launcher")}, (name, targets)
        if top == "opentc_compare":
            assert not {t for t in targets if not t.startswith("opentc_compare")}, (name, targets)


# The launcher's two faces: the launch contract (api) and the small utilities both sides share (common).
FACES = ("opentc_launcher.api", "opentc_launcher.common")


def test_the_toolkit_uses_the_launcher_only_through_its_public_faces():
    """Issue 41: opentc_launcher.api names what a front end may use; the rest of the launcher can change under it.
    Issue 53: the utilities both sides use (printable, flag, prctl, write_json, ...) are opentc_launcher.common's."""
    reaching_in = {name: sorted(t for t in targets if t.startswith("opentc_launcher") and t not in FACES)
                   for name, targets in graph().items() if name.startswith("opentc_toolkit")}
    assert not {name: targets for name, targets in reaching_in.items() if targets}, reaching_in


def test_the_images_build_scripts_use_the_launcher_only_through_its_public_faces():
    """container/ (build_info.py's check of the XLA:CUDA plugin, help.py) is a front end too."""
    names = {module_name(path, root) for root in PACKAGES.values() for path in root.rglob("*.py")}
    reaching_in = {path.name: sorted(m for m in imports(path, path.stem, names)
                                     if m.startswith("opentc_launcher") and m not in FACES)
                   for path in (REPO / "container").glob("*.py")}
    assert not {name: found for name, found in reaching_in.items() if found}, reaching_in


@pytest.mark.parametrize("face", FACES)
def test_each_face_names_only_what_it_imports(face):
    import importlib

    module = importlib.import_module(face)
    assert sorted(module.__all__) == sorted(name for name in vars(module) if not name.startswith("_")
                                            and name not in {"annotations"})


def test_the_faces_share_no_name_and_the_contract_holds_no_utility():
    """A name is in one face: what a launch is (api), or a utility with no launch in it (common)."""
    import opentc_launcher.api as api
    import opentc_launcher.common as common

    assert not set(api.__all__) & set(common.__all__)
    assert len(api.__all__) <= 55, "the contract grows: is the new name a utility (common), or the launcher's own?"


def test_no_module_imports_one_that_imports_it_back():
    """Not even a package's __init__ and its own submodules: a submodule that needs a name of its package's __init__
    takes it from a module both import."""
    edges = graph()

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for target in edges.get(node, ()):
                if target == start:
                    return [*path, target]
                if target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
        return None

    cycles = [cycle for name in sorted(edges) if (cycle := cycle_from(name))]
    assert not cycles, cycles[:5]


@pytest.mark.parametrize("prefix", ["sagemaker_training_compiler_", "sagemaker_pytorch_xla_"])
def test_the_launcher_names_no_sagemaker_hyperparameter(prefix):
    """It words settings by its own options; a front end hands down its own names (setting_names)."""
    named = [f"{path.relative_to(REPO)}:{number}" for path in (REPO / "launcher" / "src").rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1) if prefix in line]
    assert not named, named
