"""The package's dependency order, read from its source (imports inside functions included):

    shared modules (airetrain/*.py but the commands)    import only shared modules
    stages (plan, stage, checkpoint, report, train,      import shared modules and themselves, and another
    tune)                                                stage only where ALLOWED says why
    commands (cli, job, lightning, hf, doctor,           import anything
    resolve, tuning, site_command, __main__, the
    workflow's scripts)

and no cycle between any two modules of the package."""
import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "airetrain"
STAGES = {"plan", "health", "stage", "checkpoint", "report", "train", "tune"}
COMMANDS = {"cli", "commands", "job", "lightning", "hf", "__main__"}
ALLOWED = {("train", "checkpoint"): "the trainer saves and resumes through the checkpointer, and script mode "
                                    "mirrors a script's checkpoints to scratch"}


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that the module `name` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from . import x` and `from .pkg import module`: the names may be modules themselves
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("airetrain") and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def layer(module: str) -> tuple[str, str]:
    """(its layer: shared, stage or command; its unit: the stage, or the module's own name)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "shared", "airetrain"
    if parts[1] in STAGES:
        return "stage", parts[1]
    if parts[1] == "workflow" and len(parts) > 2:   # the workflow's scripts: torchrun's entry point
        return "command", ".".join(parts[1:])
    return ("command" if parts[1] in COMMANDS else "shared"), parts[1]


def forbidden(source: str, target: str) -> str | None:
    """Why the import of target by source breaks the order, or None."""
    (kind, unit), (target_kind, target_unit) = layer(source), layer(target)
    if kind == "command":
        return None
    if target_kind == "command":
        return "a command is imported from below"
    if kind == "shared" and target_kind == "stage":
        return f"a shared module imports the stage {target_unit}"
    if kind == "stage" and target_kind == "stage" and unit != target_unit and (unit, target_unit) not in ALLOWED:
        return f"the stage {unit} imports the stage {target_unit}"
    return None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), as a list of names."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    edges = graph()
    assert "airetrain.train.estimate" in edges["airetrain.commands.resolve"]        # inside a function
    assert "airetrain.train.parallel.process_group" in edges["airetrain.train.progress"]   # from .parallel import x
    assert "airetrain.records" in edges["airetrain.plan.planner"]      # from ..records import ...
    assert {layer(m)[0] for m in edges} == {"shared", "stage", "command"}


def test_every_import_follows_the_order():
    broken = [f"{source} -> {target}: {why}" for source, targets in sorted(graph().items())
              for target in sorted(targets) if (why := forbidden(source, target))]
    assert not broken, "\n".join(broken)


def test_no_module_takes_part_in_an_import_cycle():
    assert cycles(graph()) == []


def test_no_stage_imports_another_and_no_unit_cycle():
    """At the level of the rooms: the stages and the shared modules form no cycle either."""
    units: dict[str, set[str]] = {}
    for source, targets in graph().items():
        unit = layer(source)[1]
        units.setdefault(unit, set()).update(layer(t)[1] for t in targets if layer(t)[1] != unit)
    assert cycles(units) == []


def test_the_check_itself_refuses_what_it_should():
    assert forbidden("airetrain.plan.planner", "airetrain.train.estimate") == "the stage plan imports the stage train"
    assert forbidden("airetrain.roots", "airetrain.plan.config") == "a shared module imports the stage plan"
    assert forbidden("airetrain.train.loop", "airetrain.checkpoint.manager") is None   # ALLOWED, with its reason
    assert forbidden("airetrain.report.status", "airetrain.cli") == "a command is imported from below"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


ARGPARSE = {"airetrain.cli.build_parser"}   # the command line's declarations: one add_argument after another


def test_no_file_over_400_lines_and_no_function_over_60():
    too_long = []
    for name, path in modules().items():
        source = path.read_text()
        if len(source.splitlines()) > 400:
            too_long.append(f"{path.relative_to(REPO)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and f"{name}.{node.name}" not in ARGPARSE:
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    too_long.append(f"{path.relative_to(REPO)}: {node.name} is {length} lines")
    assert too_long == []


def test_every_test_module_has_a_name_of_its_own():
    """pytest imports test modules by their basename (the folders are not packages): two of one name
    fail the whole suite's collection."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py") if "state" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def map_entries(docstring: str) -> tuple[set[str], set[str]]:
    """(every name a map lists, the names that begin its lines): an entry is a name (a package's with
    '/') followed by two spaces or more, at a line's indent or after two spaces or more."""
    import re

    listed, first = set(), set()
    for line in docstring.splitlines():
        names = re.findall(r"(?:^    |\s{2,})(\w+)/?(?=\s{2,})", line)
        listed |= set(names)
        if names and line.startswith("    ") and not line.startswith("     "):
            first.add(names[0])
    return listed, first


def test_every_module_is_named_in_its_packages_map():
    """Each package's docstring is its map: every module and subpackage in it has an entry, and every
    entry that begins a line names one that exists."""
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        if folder.name == "workflow":   # the workflow's files, not Python modules
            continue
        present = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"} | \
                  {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
        listed, first = map_entries(ast.get_docstring(ast.parse(init.read_text()), clean=False) or "")
        missing, stale = sorted(present - listed), sorted(first - present)
        assert not missing, f"{init.relative_to(REPO)}'s map has no entry for {', '.join(missing)}"
        assert not stale, f"{init.relative_to(REPO)}'s map names {', '.join(stale)}, which is not there"


def test_no_two_modules_share_a_name():
    """A name says what a module holds: two modules of one name in two rooms hold two things under one word."""
    by_name: dict[str, list[str]] = {}
    for name in modules():   # the scripts torchrun runs are files, not modules anything imports
        if name != "airetrain" and not name.startswith("airetrain.workflow.scripts."):
            by_name.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    shared = {stem: names for stem, names in by_name.items() if len(names) > 1}
    assert shared == {}, shared


SLURM_COMMANDS = {"sbatch", "scontrol", "sacct", "sacctmgr", "sinfo", "squeue", "srun", "scancel"}


def test_only_the_slurm_module_runs_slurms_commands():
    """One runner, one timeout policy: a SLURM command's argument list anywhere else (a subprocess call, a runner
    of a module's own) is a second way to call it, unless it goes to the slurm module's runner. The lines of a
    batch script or a rule are text, not argument lists, and are not counted."""
    found = []
    for name, path in modules().items():
        if name == "airetrain.cluster.slurm":
            continue
        tree = ast.parse(path.read_text())
        to_slurm = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call) and
                    isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and
                    node.func.value.id == "slurm" for arg in node.args}
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant) and \
                    node.elts[0].value in SLURM_COMMANDS and id(node) not in to_slurm:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} runs {node.elts[0].value}")
    assert found == []
