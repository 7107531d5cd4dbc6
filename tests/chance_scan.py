"""The suite's sources read for its chance budget (tests/chance.py): every check a test makes
through chance.py with how often it runs, every assert on noise that goes around it, and every
`# not chance:` exemption with its reason. tests/test_chance.py holds the suite to them and
benchmarks/test_suite.py lists them on docs/measurements/test-suite.md: one reading for both.

What counts as noise. A test that starts a process or reads a clock (directly, through a helper or a
fixture of its module or of conftest.py, or marked `launches`) asserts on what its processes and
clocks made. In such a test, and in the helpers it calls, an assert goes through chance.py, or says
on its line or a comment line of its own right above it why chance cannot fail it
(`# not chance: <why>`, which may run on over the comment lines below it), where it is
- an ordering assert on a name that looks measured (a time, a rate, a width) or on a clock read;
- an equality, membership or truth assert on a decision reached against noise: a verdict, a named
  phase or rank, a straggler named, a flag, a largest cause;
- an approximate equality (`pytest.approx`) on a measured-looking name.
The reason must say why for that assert: an empty or generic one ("deterministic", "not noise") is
refused, and so is an exemption that sits on no assert.

How often a check runs. A check in a test runs once per parametrization; a check in a helper runs
once per call of the helper, summed over its call sites (each counted as often as its caller runs);
a check in a fixture once per test that asks for it. A check, or a call of a helper that holds one,
inside a loop runs an uncounted number of times and is refused.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field

TESTS = os.path.dirname(os.path.abspath(__file__))
RATE = 1e-4  # chance.RATE, the rate of a check that states none (kept here: this module needs no scipy)
CHECKS = (
    "mean_at_least",
    "mean_at_most",
    "difference_at_least",
    "difference_at_most",
    "proportion_at_least",
    "verdict",
)
EXEMPT = "# not chance:"
SYNTHETIC = ("test_chance.py", "test_chance_page.py")
"""The tests of chance.py and of this reading themselves: their checks run on draws and logs they
make, not on the suite's measurements, and are not the suite's budget."""

MEASURED = re.compile(
    r"(_s|_ms|_us|seconds|step|width|low|high|ratio|efficiency|throughput|speed|slower|faster|grew|"
    r"wait|delay|slept|share|gap|overhead|elapsed|duration|rate|slowdown|cores|value|flop|memory|bytes)",
    re.IGNORECASE,
)
"""A name that looks like a measured figure (a part of a name: `step_times_s`, `waited`)."""
DECISION_WORDS = {
    "verdict", "verdicts", "straggler", "stragglers", "named", "flagged", "largest", "slowest", "fastest",
    "busy", "regression", "regressions", "improvement", "inconclusive", "hung", "stuck", "confirmed",
    "significant", "winner", "slower", "faster", "advice", "sees", "sight",
}  # fmt: skip
"""Words that, anywhere in a name or a string compared, say a decision made against noise."""
DECISION_NAMES = {"rank", "phase", "held", "top", "tops", "lead", "cause", "chosen", "flag", "flags"}
"""Whole names (a key, an attribute, a variable compared) that say one: a rank or phase named, what held
the path. Only whole: `threads_per_rank` is a setting, not a rank chosen."""
CLOCKS = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns", "process_time"}
STARTS = {
    ("subprocess", "run"), ("subprocess", "Popen"), ("subprocess", "call"), ("subprocess", "check_call"),
    ("subprocess", "check_output"), ("os", "system"), ("os", "fork"), ("os", "spawnv"), ("os", "execv"),
    ("multiprocessing", "Process"), ("pexpect", "spawn"),
}  # fmt: skip
LAUNCHING_COMMANDS = {"run", "sweep", "ab", "tune", "bisect", "canary"}
"""`ddpbench(...)` runs the command line in this process; these commands start processes from it."""
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)

GENERIC = {
    "a", "an", "the", "it", "is", "are", "this", "that", "not", "no", "never", "always", "chance", "noise",
    "noisy", "deterministic", "determined", "fixed", "measured", "measure", "timing", "timed", "ok", "fine",
    "safe", "true", "holds", "exempt", "n", "na", "todo", "fixme", "here", "just", "only", "check", "assert",
    "test", "value", "figure", "fails", "fail", "cannot", "can", "by", "of", "on", "in", "to", "and", "or",
}  # fmt: skip
"""Words that say nothing about why one assert cannot fail by chance."""


def words(text: str) -> list[str]:
    return [word for word in re.split(r"[^a-z0-9]+", text.lower()) if word]


def reason_refused(reason: str) -> str | None:
    """Why an exemption's reason does not do (None where it does): it must say, in words of its
    own, why chance cannot fail that assert."""
    said = words(reason)
    if not said:
        return "an empty reason"
    specific = [word for word in said if word not in GENERIC and not word.isdigit()]
    if len(said) < 3 or len(specific) < 2:
        return f"a reason that says nothing of this assert ({reason.strip()!r}): say why chance cannot fail it"
    return None


@dataclass(frozen=True)
class Exemption:
    where: str  # file:line of the assert
    reason: str
    assert_line: str


@dataclass
class Module:
    name: str
    lines: list[str]
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    fixtures: dict[str, ast.FunctionDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    """A local name -> (module, name) of what `from module import name` brought in."""
    launches: bool = False
    """The module's pytestmark holds `launches`: every test in it starts processes."""


def read_module(folder: str, name: str) -> Module:
    with open(os.path.join(folder, name), encoding="utf-8") as handle:
        source = handle.read()
    tree = ast.parse(source)
    module = Module(name, source.splitlines(), tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            module.functions[node.name] = node
            fixture = fixture_name(node)
            if fixture:
                module.fixtures[fixture] = node
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            module.launches = "launches" in ast.unparse(node.value)
    return module


def fixture_name(function: ast.FunctionDef) -> str | None:
    for decorator in function.decorator_list:
        called = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(called) in ("pytest.fixture", "fixture"):
            if isinstance(decorator, ast.Call):
                named = next((k.value for k in decorator.keywords if k.arg == "name"), None)
                if isinstance(named, ast.Constant):
                    return named.value
            return function.name
    return None


def marked_launches(function: ast.FunctionDef) -> bool:
    return any("mark.launches" in ast.unparse(decorator) for decorator in function.decorator_list)


def dotted(node: ast.AST) -> tuple[str, ...]:
    """`subprocess.run` -> ("subprocess", "run"); a call's callee as far as it is plain names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return ()


def reads_a_clock(call: ast.Call, module: Module) -> bool:
    name = dotted(call.func)
    if len(name) == 2 and name[0] == "time" and name[1] in CLOCKS:
        return True
    return len(name) == 1 and module.imported.get(name[0], ("", ""))[0] == "time" and name[0] in CLOCKS


def starts_a_process(call: ast.Call, module: Module) -> bool:
    name = dotted(call.func)
    if name[-2:] in STARTS or (len(name) == 1 and module.imported.get(name[0]) in {(m, f) for m, f in STARTS}):
        return True
    if name == ("ddpbench",) and call.args and isinstance(call.args[0], ast.Constant):
        return call.args[0].value in LAUNCHING_COMMANDS
    return False


class Suite:
    """The test modules of a folder, with conftest.py and the helper modules they import."""

    def __init__(self, folder: str = TESTS):
        self.folder = folder
        names = sorted(name for name in os.listdir(folder) if name.endswith(".py"))
        self.modules = {name[:-3]: read_module(folder, name) for name in names}
        self.tests = [name[:-3] for name in names if name.startswith("test_") and name not in SYNTHETIC]
        self._noisy: dict[tuple[str, str], bool] = {}
        self._runs: dict[tuple[str, str], int | None] = {}

    # --- which functions start a process or read a clock ----------------------------------------

    def resolve(self, module: Module, name: str) -> tuple[str, str] | None:
        """(module, function) a name called in `module` refers to, where it is one of the suite's."""
        if name in module.functions:
            return module.name[:-3], name
        source = module.imported.get(name)
        if source and source[0] in self.modules and source[1] in self.modules[source[0]].functions:
            return source
        return None

    def fixture(self, module: Module, name: str) -> tuple[str, str] | None:
        """(module, function) of the fixture a parameter named `name` receives."""
        for owner in (module, self.modules.get("conftest")):
            if owner is not None and name in owner.fixtures:
                return owner.name[:-3], owner.fixtures[name].name
        source = module.imported.get(name)  # a fixture imported from another module
        if source and source[0] in self.modules and source[1] in self.modules[source[0]].fixtures:
            return source[0], self.modules[source[0]].fixtures[source[1]].name
        return None

    def noisy(self, key: tuple[str, str]) -> bool:
        """Whether the function starts a process or reads a clock, itself, through a function of
        the suite it calls, or through a fixture it asks for; or is marked as one that launches."""
        if key in self._noisy:
            return self._noisy[key]
        self._noisy[key] = False  # a cycle adds nothing
        module = self.modules[key[0]]
        function = module.functions[key[1]]
        found = marked_launches(function) or (
            module.launches and (key[1].startswith("test_") or bool(fixture_name(function)))
        )
        for node in ast.walk(function):
            if found:
                break
            if isinstance(node, ast.Call):
                if reads_a_clock(node, module) or starts_a_process(node, module):
                    found = True
                elif isinstance(node.func, ast.Name) and (callee := self.resolve(module, node.func.id)):
                    found = self.noisy(callee)
        if not found and (key[1].startswith("test_") or fixture_name(function)):
            for argument in function.args.args:
                given = self.fixture(module, argument.arg)
                if given and given != key and self.noisy(given):
                    found = True
                    break
        self._noisy[key] = found
        return found

    def scanned(self, name: str) -> set[str]:
        """The functions of a test module whose asserts see noise: those that start a process or
        read a clock, and the module's helpers they call."""
        module = self.modules[name]
        found = {f for f in module.functions if self.noisy((name, f))}
        todo = list(found)
        while todo:
            function = module.functions[todo.pop()]
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    callee = node.func.id
                    if callee in module.functions and callee not in found:
                        found.add(callee)
                        todo.append(callee)
        return found

    # --- the asserts ------------------------------------------------------------------------------

    def exemption_of(self, module: Module, node: ast.Assert) -> tuple[int, str] | None:
        """(line, reason) of the `# not chance:` on the assert's first line, or in the comment lines
        right above it (the reason may run on over the comment lines that follow it)."""
        own = module.lines[node.lineno - 1]
        if EXEMPT in own:
            return node.lineno, own.split(EXEMPT, 1)[1].strip()
        above = node.lineno - 1  # 1-based line number of the line above
        following: list[str] = []
        while above >= 1 and module.lines[above - 1].strip().startswith("#"):
            text = module.lines[above - 1].strip()
            if text.startswith(EXEMPT):
                return above, " ".join([text[len(EXEMPT) :].strip(), *following]).strip()
            following.insert(0, text.lstrip("#").strip())
            above -= 1
        return None

    def review(self, name: str) -> tuple[list[str], list[Exemption]]:
        """(what is wrong, the exemptions) of one test module."""
        module = self.modules[name]
        problems, exemptions, used = [], [], set()
        source = "\n".join(module.lines)
        reference = "# chance: reference computation" in source  # intervals recomputed over saved records
        if not reference and re.search(r"scipy\.stats|statistics\.stdev|\.ppf\(", source):
            problems.append(
                f"{module.name}: computes an interval itself (scipy.stats, stdev or ppf); use tests/chance.py"
            )
        scanned = self.scanned(name)
        for function_name, function in module.functions.items():
            for node in ast.walk(function):
                if not isinstance(node, ast.Assert):
                    continue
                where = f"{module.name}:{node.lineno}"
                exemption = self.exemption_of(module, node)
                if exemption is not None:
                    used.add(exemption[0])
                    refused = reason_refused(exemption[1])
                    if refused:
                        problems.append(f"{where}: `{EXEMPT}` with {refused}")
                    else:
                        line = module.lines[node.lineno - 1].split(EXEMPT, 1)[0].strip()
                        exemptions.append(Exemption(where, exemption[1], line))
                    continue
                if function_name in scanned:
                    kind = on_noise(node.test, clock_names(function, module), module)
                    if kind:
                        problems.append(
                            f"{where}: {kind} around tests/chance.py: {module.lines[node.lineno - 1].strip()}"
                        )
        for index, line in enumerate(module.lines, 1):
            if EXEMPT in line and index not in used:
                problems.append(f"{module.name}:{index}: `{EXEMPT}` on no assert: it exempts nothing")
        return problems, exemptions

    # --- how often each check runs ---------------------------------------------------------------

    def runs(self, key: tuple[str, str], path: tuple = ()) -> int:
        """How many times a function runs in the suite: a test once per parametrization, a fixture
        once per test that asks for it, a helper once per call, summed over its call sites."""
        if key in self._runs:
            return self._runs[key]
        if key in path:
            raise AssertionError(f"{key[0]}.py: {key[1]} calls itself: its checks run an uncounted number of times")
        module = self.modules[key[0]]
        function = module.functions[key[1]]
        where = f"{key[0]}.py:{function.lineno}"
        if key[1].startswith("test_") and key[0] in self.tests:
            count = parametrizations(function)
            if count is None:
                raise AssertionError(f"{where}: parametrized over a list this scan cannot count")
        elif fixture_name(function):
            count = sum(self.runs(user, (*path, key)) for user in self.fixture_users(key))
        else:
            count = 0
            for caller, call, looped in self.call_sites(key):
                if looped:
                    raise AssertionError(
                        f"{caller[0]}.py:{call.lineno}: {key[1]} makes a chance check and is called in a loop: "
                        "it runs an uncounted number of times"
                    )
                count += self.runs(caller, (*path, key))
        self._runs[key] = count
        return count

    def fixture_users(self, key: tuple[str, str]):
        fixture = fixture_name(self.modules[key[0]].functions[key[1]])
        for name, module in self.modules.items():
            for function_name, function in module.functions.items():
                if fixture in (a.arg for a in function.args.args) and self.fixture(module, fixture) == key:
                    yield name, function_name

    def call_sites(self, key: tuple[str, str]):
        """(caller, call, inside a loop) for every call of the function in the suite."""
        for name, module in self.modules.items():
            for function_name, function in module.functions.items():
                looped = looped_nodes(function)
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                        if self.resolve(module, node.func.id) == key:
                            yield (name, function_name), node, id(node) in looped

    def stated_rates(self) -> list[tuple[str, float]]:
        """Every check the tests make through chance.py, with its stated rate times how often it runs."""
        rates = []
        for name in self.modules:
            if f"{name}.py" in SYNTHETIC:
                continue
            module = self.modules[name]
            checks = checks_imported(module)
            for function_name, function in module.functions.items():
                looped = looped_nodes(function)
                for call in (node for node in ast.walk(function) if isinstance(node, ast.Call)):
                    called = check_called(call, checks)
                    if called is None:
                        continue
                    where = f"{module.name}:{call.lineno}"
                    if id(call) in looped:
                        raise AssertionError(f"{where}: a check in a loop runs an uncounted number of times")
                    rate = next((k.value for k in call.keywords if k.arg == "rate"), None)
                    if called == "verdict":
                        verdict_problem(call, where)
                    if rate is not None and not isinstance(rate, ast.Constant):
                        raise AssertionError(f"{where}: a check's rate must be written as a number")
                    runs = self.runs((name, function_name))
                    if runs:
                        rates.append((where, (RATE if rate is None else rate.value) * runs))
        return rates


@dataclass(frozen=True)
class Budget:
    """What the suite states and exempts, read once."""

    rates: list[tuple[str, float]]
    """(file:line, the stated rate times how often the check runs), per check through chance.py."""
    exemptions: list[Exemption]
    problems: list[str]
    """Asserts on noise around chance.py, and exemptions that do not do: each a line to fix."""

    @property
    def total(self) -> float:
        return sum(rate for _, rate in self.rates)


def read_suite(folder: str = TESTS) -> Budget:
    """The suite's checks, exemptions and what is wrong with them, for tests/test_chance.py and the
    test-suite page (benchmarks/test_suite.py). Raises AssertionError where a check runs an
    uncounted number of times or states its rate in a way that cannot be read."""
    suite = Suite(folder)
    problems, exemptions = [], []
    for name in suite.tests:
        found, exempted = suite.review(name)
        problems += found
        exemptions += exempted
    return Budget(suite.stated_rates(), exemptions, problems)


def verdict_problem(call: ast.Call, where: str) -> None:
    given = {k.arg for k in call.keywords}
    if "rate" not in given:
        raise AssertionError(f"{where}: a verdict states its rate")
    if ("shown" in given) == ("unreachable" in given):
        raise AssertionError(
            f"{where}: a verdict gives the decision's samples (shown=) or says why they cannot be reached "
            "(unreachable=), one of the two"
        )


def checks_imported(module: Module) -> dict[str, str]:
    """A local name -> the chance.py function `from chance import ...` gave it."""
    return {local: source[1] for local, source in module.imported.items() if source[0] == "chance"}


def check_called(call: ast.Call, imported: dict[str, str]) -> str | None:
    """The chance.py check a call makes (`mean_at_least(...)`, `chance.verdict(...)`), or None."""
    if isinstance(call.func, ast.Name) and call.func.id in imported:
        called = imported[call.func.id]
    elif isinstance(call.func, ast.Attribute) and getattr(call.func.value, "id", None) == "chance":
        called = call.func.attr
    else:
        return None
    return called if called in CHECKS else None


def looped_nodes(function: ast.FunctionDef) -> set[int]:
    loops = [node for node in ast.walk(function) if isinstance(node, ast.For | ast.While | ast.comprehension)]
    return {id(inner) for loop in loops for inner in ast.walk(loop)}


def parametrizations(function: ast.FunctionDef) -> int | None:
    count = 1
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize":
            values = decorator.args[1] if len(decorator.args) > 1 else None
            if not isinstance(values, ast.List | ast.Tuple):
                return None  # a list this scan cannot count
            count *= len(values.elts)
    return count


def names_in(node: ast.AST) -> list[str]:
    found = []
    for part in ast.walk(node):
        if isinstance(part, ast.Name):
            found.append(part.id)
        elif isinstance(part, ast.Attribute):
            found.append(part.attr)
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            found.append(part.value)
    return found


def clock_names(function: ast.FunctionDef, module: Module) -> set[str]:
    """Names the function assigns from a clock read (`started = time.monotonic()`)."""
    found = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            if any(isinstance(c, ast.Call) and reads_a_clock(c, module) for c in ast.walk(node.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return found


def decision_named(node: ast.AST) -> bool:
    """Whether a compared value names a decision: by a key or an attribute anywhere in it, or by
    itself where it is a plain variable or string (not the variable a key is read from: `rank` in
    `rank["threads"]` is a record, not a rank chosen)."""
    said = []
    for part in ast.walk(node):
        if isinstance(part, ast.Attribute):
            said.append(part.attr)
        elif isinstance(part, ast.Subscript) and isinstance(part.slice, ast.Constant):
            said.append(str(part.slice.value))
    if isinstance(node, ast.Name):
        said.append(node.id)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        said.append(node.value)
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(decision_named(element) for element in node.elts)
    elif isinstance(node, ast.Dict):
        return any(decision_named(value) for value in node.values)
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        return decision_named(node.value)  # an element of a list of decisions is one
    return any(says_a_decision(name) for name in said)


def says_a_decision(name: str | None) -> bool:
    return name is not None and (name in DECISION_NAMES or bool(DECISION_WORDS & set(words(name))))


def last_name(node: ast.AST) -> str | None:
    """`load.busy` -> busy, `found["named"]` -> named, `held` -> held, `named[0]` -> named."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        return last_name(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return None


def a_set(node: ast.AST) -> bool:
    return isinstance(node, ast.Set | ast.SetComp) or (isinstance(node, ast.Call) and dotted(node.func) == ("set",))


def on_noise(test: ast.AST, clocks: set[str], module: Module) -> str | None:
    """What kind of assert on noise `test` is, or None."""
    for compare in (part for part in ast.walk(test) if isinstance(part, ast.Compare)):
        names = names_in(compare)
        clocked = any(isinstance(c, ast.Call) and reads_a_clock(c, module) for c in ast.walk(compare))
        clocked = clocked or bool(clocks & set(names))
        operands = [compare.left, *compare.comparators]
        if any(isinstance(op, ORDERING) for op in compare.ops) and not any(a_set(o) for o in operands):
            if clocked:
                return "an ordering assert on a clock read"
            if any(MEASURED.search(n) for n in names):
                return "an ordering assert on a measured figure"
        if any(isinstance(op, EQUALITY) for op in compare.ops):
            approx = any(isinstance(c, ast.Call) and dotted(c.func)[-1:] == ("approx",) for c in ast.walk(compare))
            if approx and (clocked or any(MEASURED.search(n) for n in names)):
                return "an approximate equality on a measured figure"
            if any(decision_named(operand) for operand in operands):
                return "an equality on a decision reached against noise"
    for part in truths(test):
        said = part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else last_name(part)
        if says_a_decision(said):
            return "a truth assert on a decision reached against noise"
    return None


def truths(test: ast.AST):
    """The plain values an assert takes as true or false (through `not`, `and`, `or`)."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from truths(value)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from truths(test.operand)
    elif isinstance(test, ast.Name | ast.Attribute | ast.Subscript):
        yield test
    elif isinstance(test, ast.Call) and getattr(test.func, "attr", None) in ("startswith", "endswith", "search"):
        # text.startswith("verdict: REGRESSION"), re.search(r"... sees 9.75%", text)
        yield from (argument for argument in test.args if isinstance(argument, ast.Constant))
