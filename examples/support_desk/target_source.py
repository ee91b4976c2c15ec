"""How the desk's source becomes the source of a standalone target repository.

In this package each planted fault is a runtime switch. In the target repository there are no
switches: a fault chosen for the target is the only code path of its function, a fault left out
is not in the code at all, so fixing it takes a real source edit. The edits below are exact
text replacements; each must match the stated number of times, so a change to the desk's code
that they no longer fit fails loudly (`TargetRepoError`) instead of producing a wrong target.
"""

from __future__ import annotations

from dataclasses import dataclass


class TargetRepoError(Exception):
    """The target repository cannot be made; the message says what to fix."""


@dataclass(frozen=True)
class Edit:
    """Replace `old` by `new`; with `until`, cut from `old` up to (not including) `until` instead."""

    path: str
    old: str
    new: str = ""
    count: int = 1
    until: str = ""

    def apply(self, text: str) -> str:
        found = text.count(self.old)
        if found != self.count:
            raise TargetRepoError(
                f"{self.path}: expected {self.count} occurrence(s) of {self.old.splitlines()[0].strip()!r}, "
                f"found {found}; the desk's source changed, update examples/support_desk/target_source.py"
            )
        if not self.until:
            return text.replace(self.old, self.new)
        start = text.index(self.old)
        end = text.find(self.until, start)
        if end < 0:
            raise TargetRepoError(f"{self.path}: {self.until.strip()!r} does not follow {self.old.strip()!r}")
        return text[:start] + self.new + text[end:]


@dataclass(frozen=True)
class Fault:
    """The switch-guarded site of one fault, and what it becomes with the fault in or out."""

    path: str
    switched: str
    faulty: str
    correct: str

    def edit(self, *, present: bool) -> Edit:
        return Edit(self.path, self.switched, self.faulty if present else self.correct)


_MERGE_HEAD = '''    def merge(self, results: Sequence[ToolResult]) -> list[ToolResult]:
        """Order the findings by the instant each tool call completed."""
'''
_MERGE_BY_INSTANT = '''by_completion: dict[int, ToolResult] = {}
for result in results:
    by_completion[result.finished_at_ns] = result
return [by_completion[instant] for instant in sorted(by_completion)]
'''
_MERGE_STABLE = '''# sorted() is stable: results that completed together keep the workers' order.
return sorted(results, key=lambda result: result.finished_at_ns)
'''


def _indent(block: str, spaces: int) -> str:
    return "".join(" " * spaces + line if line.strip() else line for line in block.splitlines(keepends=True))


_RETRY_HEAD = "            attempt += 1\n"
_BACKOFF = '''            # Come back when the service said it would accept the request again.
            yield Sleep(int(result.error.get("retry_after", 1)) * 1_000)
'''
_OVERRIDE = '''            # A refund for an order is sent to the desk that owns the order records.
            worker = ROUTES["order_status"]
'''

FAULTS: dict[str, Fault] = {
    "mediator_race": Fault(
        "agents/mediator.py",
        switched=_MERGE_HEAD
        + "        if self.context.config.bugs.mediator_race:\n"
        + _indent(_MERGE_BY_INSTANT, 12)
        + _indent(_MERGE_STABLE, 8),
        faulty=_MERGE_HEAD + _indent(_MERGE_BY_INSTANT, 8),
        correct=_MERGE_HEAD + _indent(_MERGE_STABLE, 8),
    ),
    "retry_loop": Fault(
        "agents/workers.py",
        switched=_RETRY_HEAD
        + "            if self.context.config.bugs.retry_loop:\n"
        + "                continue\n"
        + _BACKOFF,
        # Without the back-off the loop re-sends the identical call at once.
        faulty=_RETRY_HEAD,
        correct=_RETRY_HEAD + _BACKOFF,
    ),
    "misroute": Fault(
        "agents/planner.py",
        switched="        worker = ROUTES[intent.kind]\n"
        '        if self.context.config.bugs.misroute and intent.kind == "refund" and intent.order_ids:\n'
        + _OVERRIDE
        + "        return worker\n",
        faulty="        worker = ROUTES[intent.kind]\n"
        '        if intent.kind == "refund" and intent.order_ids:\n' + _OVERRIDE + "        return worker\n",
        correct="        return ROUTES[intent.kind]\n",
    ),
}

# With no switches left, the plumbing that carried them goes too.
PLUMBING: tuple[Edit, ...] = (
    Edit(
        "config.py",
        '''"""Run configuration: which planted faults are active and which model labels to report.

The three switches below guard real code paths in the agents. Each switch selects the
faulty variant of one function; the correct variant is what runs when it is off.
"""''',
        '"""Run configuration: the model labels written on `chat` spans."""',
    ),
    Edit("config.py", "from collections.abc import Iterable\n", ""),
    Edit("config.py", "BUG_NAMES: tuple[str, ...] =", "\n", until="@dataclass(frozen=True)\nclass ModelLabels:"),
    Edit(
        "config.py",
        "    bugs: BugSwitches = field(default_factory=BugSwitches.all_on)\n",
        "",
    ),
    Edit("suite.py", "from collections.abc import Iterable, Sequence\n", "from collections.abc import Sequence\n"),
    Edit("suite.py", "from .config import BugSwitches, DeskConfig\n", "from .config import DeskConfig\n"),
    Edit("suite.py", "BugsArgument = str | Iterable[str] | BugSwitches | None\n\n\n", ""),
    Edit("suite.py", "    bugs: BugsArgument = None,\n", "", count=3),
    Edit("suite.py", "config = DeskConfig(bugs=BugSwitches.parse(bugs))", "config = DeskConfig()"),
    Edit("suite.py", "bugs=bugs, ", "", count=2),
    Edit("suite.py", "with the same seed and switches", "with the same seed"),
    Edit("cli.py", "from .config import BUG_NAMES, BugSwitches\n", ""),
    Edit(
        "cli.py",
        '''def _bugs(value: str) -> BugSwitches:
    try:
        return BugSwitches.parse(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


''',
        "",
    ),
    Edit(
        "cli.py",
        '''    parser.add_argument(
        "--bugs",
        type=_bugs,
        default=BugSwitches.all_on(),
        help=f"comma-separated switches among {', '.join(BUG_NAMES)}, or 'all' (default) or 'none'",
    )
''',
        "",
    ),
    Edit("cli.py", ", bugs: BugSwitches) -> None:", ") -> None:"),
    Edit("cli.py", " switches={bugs.describe()}", ""),
    Edit("cli.py", "release=args.release, bugs=args.bugs, seed=args.seed", "release=args.release, seed=args.seed", 2),
    Edit("cli.py", "seed=args.seed, bugs=args.bugs)", "seed=args.seed)"),
    # The target cannot make targets: that command belongs to the example.
    Edit(
        "cli.py",
        ", `serve` and\n`make-target-repo` (the desk as a standalone repository for Clear's evolution pipeline).",
        " and `serve`.",
    ),
    Edit(
        "cli.py",
        '''
    make_target = commands.add_parser(
        "make-target-repo", help="write the desk as a standalone git repository for Clear's evolution pipeline"
    )
    make_target.add_argument("dest", type=Path, help="directory to create (must not exist or be empty)")
    make_target.add_argument(
        "--bugs",
        default=None,
        help="faults built into the repository's code: a comma-separated list, 'all' or 'none' "
        "(default mediator_race,retry_loop)",
    )
''',
        "",
    ),
    Edit(
        "cli.py",
        '''def _make_target_repo(args: argparse.Namespace) -> int:
    from .target_repo import TargetRepoError, target_repo_make

    try:
        commit = target_repo_make(dest=args.dest, bugs=args.bugs)
    except (TargetRepoError, ValueError) as error:
        print(f"make-target-repo: {error}", file=sys.stderr)
        return 2
    print(f"{args.dest}: branch main at {commit}")
    return 0


''',
        "",
    ),
    Edit(
        "cli.py",
        '''    if args.command == "make-target-repo":
        return _make_target_repo(args)
''',
        "",
    ),
    Edit("__init__.py", "from .config import BUG_NAMES, BugSwitches\n", ""),
    Edit("__init__.py", '    "BUG_NAMES",\n', ""),
    Edit("__init__.py", '    "BugSwitches",\n', ""),
    Edit("__init__.py", 'bugs="none", ', ""),
)

# Nothing of the example's packaging may survive into the target's code.
FORBIDDEN_IN_TARGET: tuple[str, ...] = ("examples.", "config.bugs", "BugSwitches", "BUG_NAMES", "target_repo")


def target_source(files: dict[str, str], *, bugs: frozenset[str]) -> dict[str, str]:
    """The target's package files (relative path -> text) from the desk's, with `bugs` built in."""
    result = dict(files)
    edits = [fault.edit(present=name in bugs) for name, fault in FAULTS.items()] + list(PLUMBING)
    for edit in edits:
        if edit.path not in result:
            raise TargetRepoError(f"{edit.path}: not in the desk's package; update target_source.py")
        result[edit.path] = edit.apply(result[edit.path])
    for path, text in result.items():
        text = text.replace("examples.support_desk", "support_desk")
        for marker in FORBIDDEN_IN_TARGET:
            if marker in text:
                raise TargetRepoError(f"{path}: {marker!r} is left in the target's code; update target_source.py")
        result[path] = text
    return result
