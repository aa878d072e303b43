"""The ledger of every change the image makes to another library's code (opentc_launcher.library_changes): every such
change is in it (read from the launcher's source), each does on the pinned stack what it declares (each made for real
in one child process: the xla image's stack, which CI's venv installs; tests/container/test_image.py does the same in
each image), the images' versions it knows are the pins, a change that cannot be made is a finding in the worker's
record, and what a worker with the patches off still changes is only what observes and what the launch needs (one real
job)."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env, run_train
from opentc_launcher import library_changes
from opentc_launcher.identity import WorkerIdentity
from opentc_launcher.options import WorkerOptions
from opentc_launcher.patching import DEFAULT, LAUNCH, OBSERVER, PATCH, LibraryChange, TargetChanged, arm_change
from opentc_launcher.worker_session import WorkerSession

LAUNCHER = REPO / "launcher" / "src" / "opentc_launcher"
# What changes a library's code (replace.py), and torch's registration of a device module.
PRIMITIVES = {"replace_once", "set_once", "_register_device_module"}
# What makes a wrapper of a function, when put in another object's attribute.
WRAPPING = {"partial", "staticmethod", "classmethod", "MethodType", "wraps"}
EXEMPT = "# not a library's code"
LEDGER = library_changes.ledger()


def module_of(path: Path) -> str:
    parts = path.relative_to(LAUNCHER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def outermost(tree: ast.Module):
    """(qualified name, node) of each top-level function and each method of a top-level class."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{inner.name}", inner


def called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def sources():
    for path in sorted(LAUNCHER.rglob("*.py")):
        if path.name != "replace.py":
            yield path, ast.parse(path.read_text()), path.read_text().splitlines()


def test_every_change_to_a_librarys_code_is_made_by_a_function_the_ledger_names():
    """A replace_once (or set_once, or a device module registered) anywhere but in a ledger's change fails here."""
    named = {f"{c.apply.__module__}:{c.apply.__qualname__}" for c in LEDGER}
    outside = []
    for path, tree, _ in sources():
        for qualname, function in outermost(tree):
            calls = [n for n in ast.walk(function) if isinstance(n, ast.Call) and called(n) in PRIMITIVES]
            if calls and f"{module_of(path)}:{qualname}" not in named:
                outside.append(f"{path.relative_to(REPO)}:{calls[0].lineno} ({qualname})")
        top_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        outside += [f"{path.relative_to(REPO)}:{n.lineno}" for node in top_level for n in ast.walk(node)
                    if isinstance(n, ast.Call) and called(n) in PRIMITIVES]
    assert not outside, ("these change a library's code outside the ledger: make each a LibraryChange "
                         f"(patching.py) and list it (library_changes.py): {outside}")


def wrapper_values(function: ast.AST, module_functions: set[str]) -> set[str]:
    """Names in `function` bound to functions or lambdas (a wrapper's usual names)."""
    return module_functions | {n.name for n in ast.walk(function) if isinstance(n, (ast.FunctionDef,
                                                                                    ast.AsyncFunctionDef))}


def is_wrapper(value: ast.AST, functions: set[str]) -> bool:
    return (isinstance(value, ast.Lambda) or (isinstance(value, ast.Name) and value.id in functions)
            or (isinstance(value, ast.Call) and called(value) in WRAPPING))


def test_no_wrapper_is_put_in_a_librarys_attribute_but_through_the_ledger():
    """`dist.init_process_group = wrapper`, `setattr(module, name, function)`, `Trainer.x = staticmethod(f)`: the
    ways a change escapes replace.py (and so the test above); a line marked `# not a library's code` says why not."""
    found = []
    for path, tree, lines in sources():
        module_functions = {name for name, _ in outermost(tree)}
        for _, function in outermost(tree):
            functions = wrapper_values(function, module_functions)
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    targets = [t for t in node.targets if isinstance(t, ast.Attribute)
                               and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"))]
                    hit = bool(targets) and is_wrapper(node.value, functions)
                elif isinstance(node, ast.Call) and called(node) == "setattr" and len(node.args) == 3:
                    hit = is_wrapper(node.args[2], functions)
                else:
                    continue
                if hit and EXEMPT not in lines[node.lineno - 1] + lines[node.lineno - 2]:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, f"a wrapper put in place outside replace.py (make it a change of the ledger): {found}"


def test_each_change_is_named_once_and_says_what_why_and_its_off_switch():
    names = [c.name for c in LEDGER]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for change in LEDGER:
        assert change.kind in (PATCH, DEFAULT, LAUNCH, OBSERVER) and change.target and change.why, change.name
        assert change.kind != DEFAULT or change.default, change.name
        assert change.module.split(".")[0] == change.target.split(".")[0], change.name   # the library it changes


def pins(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9][\w.-]*)==([\w.+]+)$", path.read_text(), re.MULTILINE))


def test_the_images_versions_the_ledger_knows_are_the_pins():
    """A pin that moves fails here until every change is shown to do what it declares on the new version."""
    shared = pins(REPO / "constraints.txt")
    for flavour, versions in library_changes.ON_THE_IMAGES.items():
        pinned = {**shared, **pins(REPO / "stacks" / f"{flavour}.txt")}
        assert {d: pinned.get(d) for d in versions} == dict(versions), flavour
    distributions = {c.distribution for c in LEDGER}
    assert distributions <= set(library_changes.ON_THE_IMAGES["xla"]), distributions


@pytest.fixture(scope="module")
def checked():
    """Every change made for real, in one child process: what each did on the versions installed here."""
    done = subprocess.run([sys.executable, "-m", "opentc_launcher.library_changes", "--check", "--json"],
                          env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("change", LEDGER, ids=lambda c: c.name)
def test_each_change_does_what_the_ledger_says_on_the_pinned_stack(change, checked):
    version = library_changes.installed(change.distribution)
    assert version == library_changes.ON_THE_IMAGES["xla"][change.distribution]   # CI's venv: the xla image's stack
    status, reason = checked[change.name]
    assert status == library_changes.known_status(change, version).status == change.on_the_images, reason


def test_a_change_that_cannot_be_made_is_a_finding_in_the_workers_record(tmp_path, monkeypatch):
    (tmp_path / "opentc_changed_library.py").write_text("def target():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def guard(module):
        raise TargetChanged("opentc_changed_library.target takes no arguments any more")

    change = LibraryChange(name="test-change", module="opentc_changed_library", target="opentc_changed_library.target",
                           why="a test", apply=guard, unpatched="the test's reads stay")
    records = tmp_path / "records"
    records.mkdir()
    session = WorkerSession(WorkerOptions(backend="eager", device="cpu", summary_dir=str(records)),
                            WorkerIdentity(rank=0, local_rank=0, world_size=1, local_world_size=1), "rank0")
    arm_change(change)
    try:
        import opentc_changed_library  # noqa: F401  (the change's module, imported as a script would)
    finally:
        sys.modules.pop("opentc_changed_library", None)
    session.write_results(0, None)
    findings = json.loads(next(records.iterdir()).read_text())["findings"]
    said = [f for f in findings if "test-change" in f]
    assert len(said) == 1 and said[0].startswith("library patch test-change was not made: opentc_changed_library."
                                                 "target takes no arguments any more"), findings
    assert "so the test's reads stay" in said[0] and "train --dry-run" in said[0]


def never_checked(names):
    raise AssertionError(f"no version here is unknown to the ledger, yet {names} were checked")


def test_a_requirements_txts_versions_are_judged_by_what_the_ledger_knows():
    """transformers 4.38.0 (AWS's GPT-2 notebook's): the era's patches are known to apply there, the rest not known
    until the job runs; nothing is checked in a child, since nothing installed here is unknown."""
    lines = library_changes.listing(WorkerOptions(backend="xla", device="cpu"), {}, {"transformers": "4.38.0"},
                                    checked=never_checked)
    by_name = {line.split(" (")[0].split()[-1]: line for line in lines}
    assert by_name["transformers-4-fp16-on-xla"].endswith(
        ": applies (transformers 4.38.0: tests/test_aws_examples.py: AWS's GPT-2 notebook (run_clm.py))")
    assert by_name["transformers-masks-on-device"].endswith(
        ": not known for transformers 4.38.0 (requirements.txt): its guard decides when the job starts")
    assert by_name["safetensors-save-from-xla"].endswith(": applies (safetensors 0.8.0: the images' own version, "
                                                         "tested)")
    assert by_name["xla-syncs-seen"].endswith("(stays with the patches off)")
    assert len(lines) == len(library_changes.for_backend("xla"))


def test_an_installed_version_the_ledger_does_not_know_is_checked_for_real(monkeypatch):
    """An image built FROM this one with another accelerate: its changes are made in a child process (here a stand-in
    for it: the child is what test_each_change_does_what_the_ledger_says runs)."""
    real = library_changes.installed
    monkeypatch.setattr(library_changes, "installed", lambda d: "1.99.0" if d == "accelerate" else real(d))
    asked = []

    def checked(names):
        asked.extend(names)
        return dict.fromkeys(names, ("would fail its guard", "accelerate's target moved"))

    lines = library_changes.listing(WorkerOptions(backend="eager", device="cpu"), {}, checked=checked)
    assert asked == [c.name for c in library_changes.for_backend("eager") if c.distribution == "accelerate"]
    line = next(line for line in lines if "accelerate-copies-batches-without-waiting" in line)
    assert line.endswith(": would fail its guard: accelerate's target moved (checked now: accelerate 1.99.0 is not a "
                         "version the ledger knows)")


@pytest.mark.parametrize(("options", "off"), [
    ({}, set()),
    ({"library_patches": False}, {PATCH}),          # a compile-time default has its own switch
    ({"defaults_off": "regional"}, {"torch-compile-regional", "accelerate-compile-regions-in-place"}),
    ({"defaults_off": "head"}, {"trunk-behind-a-region-boundary"}),
])
def test_what_is_off_is_what_the_settings_say(options, off):
    worker = WorkerOptions(backend="inductor", device="cpu", **options)
    lines = library_changes.listing(worker, {}, checked=never_checked)
    found = {line.split(" (")[0].split()[-1]: line for line in lines}
    turned_off = {c.name for c in library_changes.for_backend("inductor") if ": off (" in found[c.name]}
    expected = {c.name for c in library_changes.for_backend("inductor") if c.kind in off or c.name in off}
    assert turned_off == expected


@pytest.mark.slow
@pytest.mark.inductor
def test_library_patches_false_leaves_only_what_observes_and_what_the_launch_needs(make_job):
    """The setting's help: every patch is off; the observers, the launch's own hooks and the compile-time defaults
    (off by their own names) stay, and the worker's log names them. The script imports every library the patches
    change, then reports what was made in its process."""
    job = make_job(script="library_changes_made.py", sagemaker_training_compiler_enabled=True,
                   sagemaker_training_compiler_backend="inductor", sagemaker_training_compiler_library_patches=False)
    result = run_train(job)
    assert result.returncode == 0, result.output[-4000:]
    seen = job.read_json("model/made.json")
    kinds = {c.name: c.kind for c in LEDGER}
    assert {name: kinds[name] for name in seen["made"] if kinds[name] not in (OBSERVER, LAUNCH, DEFAULT)} == {}
    assert {"host-reads-counted", "batches-counted", "model-seen-when-made"} <= set(seen["made"]), seen
    assert not seen["torch_compile_is_torchs"] and not seen["compile_regions_is_accelerates"], seen   # regional's
    assert seen["masks_as_installed"] and seen["collator_as_installed"], seen
    assert ("library patches off (sagemaker_training_compiler_library_patches=false): the libraries "
            "run as installed, but for what only observes (host-reads-counted, batches-counted") in result.output
    defaults = result.output.split("and the compile-time defaults (head, regional), which ", 1)[1].split("\n")[0]
    assert defaults == "hyperparameter sagemaker_training_compiler_defaults_off turns off", \
        defaults


def test_the_ledgers_table_in_the_docs_is_the_code():
    """`python -m opentc_launcher.library_changes --table docs/versions.md` rewrites it."""
    page = (REPO / "docs" / "versions.md").read_text()
    assert library_changes.with_table(page) == page
