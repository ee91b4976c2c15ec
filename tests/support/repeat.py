"""Run some tests N times in one pytest run (issue 44: a flaky test is only caught by running it often, under load).

    pytest --repeat-count 20 --repeat-id tests/a.py::test_x --repeat-id tests/b.py  [other tests]

Each collected test whose id is, or lies under, a --repeat-id is followed by N - 1 copies, `test[repeat-K]` or
`test[params-repeat-K]` (K = 2..N; the original is run 1), placed right after it so that module- and parameter-scoped
fixtures (the demo server of tests/foundation/test_demo.py) are set up once for all copies. Under pytest-xdist the
copies are scheduled like any test, beside whatever else the run holds. The terminal summary lists every failed run
(test id, run number, duration) and how many runs of each repeated test passed. scripts/test.sh --repeat N <tests>
sets the options.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

_RUN = re.compile(r"\[(?:(.*)-)?repeat-(\d+)\]$")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("repeat", "running tests several times (tests/support/repeat.py)")
    group.addoption("--repeat-count", type=int, default=1, metavar="N",
                    help="run the tests named by --repeat-id N times each")
    group.addoption("--repeat-id", action="append", default=[], metavar="NODEID",
                    help="a test id, module or directory whose tests --repeat-count repeats (may be given again)")


def repeat_run_of(nodeid: str) -> tuple[str, int]:
    """(the repeated test's own id, its run number) of a copy's id (`…::test[repeat-3]`, `…::test[sqlite-repeat-3]`);
    run 1 for an original."""
    match = _RUN.search(nodeid)
    if not match:
        return nodeid, 1
    return nodeid[:match.start()] + (f"[{match.group(1)}]" if match.group(1) else ""), int(match.group(2))


def _selected(nodeid: str, wanted: list[str]) -> bool:
    for want in wanted:
        want = want.rstrip("/")
        if nodeid == want or nodeid.startswith((want + "::", want + "/", want + "[")):
            return True
    return False


def _normalised(config: pytest.Config, ids: list[str]) -> list[str]:
    """Ids as pytest writes node ids: relative to the rootdir, with '/' separators."""
    root = config.rootpath
    out = []
    for raw in ids:
        path, sep, rest = raw.partition("::")
        full = (config.invocation_params.dir / path).resolve()
        try:
            path = full.relative_to(root).as_posix()
        except ValueError:
            pass
        out.append(path + sep + rest)
    return out


def _copy(item: pytest.Item, run: int) -> pytest.Item:
    if not isinstance(item, pytest.Function):
        raise pytest.UsageError(f"--repeat-id: {item.nodeid} is not a test function; it cannot be repeated")
    callspec = getattr(item, "callspec", None)
    own = item.nodeid[len(item.nodeid) - len(item.name):]  # the name part, "[params]" included
    params = f"{own[own.index('[') + 1:-1]}-repeat-{run}" if own.endswith("]") and "[" in own else f"repeat-{run}"
    copy = pytest.Function.from_parent(item.parent, name=f"{item.originalname}[{params}]", callspec=callspec,
                                       callobj=item.obj, fixtureinfo=item._fixtureinfo, originalname=item.originalname)
    # The id pytest derives from a callspec would be the original's: the copy's must differ, for xdist and reports.
    nodeid = f"{item.nodeid[:len(item.nodeid) - len(own)]}{item.originalname}[{params}]"
    if hasattr(copy, "_id"):  # pytest >= 9
        from _pytest.nodes import NodeId

        copy._id = NodeId.parse(nodeid)
    else:
        copy._nodeid = nodeid
    # Marks the original got at collection (e.g. from a conftest's pytest_collection_modifyitems) hold for copies.
    for marker in item.own_markers:
        if marker not in copy.own_markers:
            copy.add_marker(marker)
    return copy


@pytest.hookimpl(trylast=True)  # after deselection (-m, -k) and pytest's grouping of items by fixture parameters
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    count = config.getoption("repeat_count")
    wanted = _normalised(config, config.getoption("repeat_id"))
    if count < 1:
        raise pytest.UsageError("--repeat-count must be 1 or more")
    if not wanted or count == 1:
        return
    out: list[pytest.Item] = []
    matched = 0
    for item in items:
        out.append(item)
        if _selected(item.nodeid, wanted):
            matched += 1
            out.extend(_copy(item, run) for run in range(2, count + 1))
    if not matched:
        raise pytest.UsageError(f"--repeat-id: no collected test matches {' '.join(wanted)}")
    items[:] = out


class _Runs:
    """Outcomes of the repeated tests' runs, kept by the process that reports (the xdist controller, or pytest)."""

    def __init__(self, config: pytest.Config) -> None:
        self.count = config.getoption("repeat_count")
        self.wanted = _normalised(config, config.getoption("repeat_id"))
        self.duration: dict[str, float] = defaultdict(float)
        self.failed: dict[str, str] = {}  # nodeid -> the phase that failed first
        self.finished: set[str] = set()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test, _ = repeat_run_of(report.nodeid)
        if not _selected(test, self.wanted):
            return
        self.duration[report.nodeid] += report.duration
        if report.failed and report.nodeid not in self.failed:
            self.failed[report.nodeid] = report.when
        if report.when == "teardown":
            self.finished.add(report.nodeid)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.duration:
            return
        write = terminalreporter.write_line
        terminalreporter.section(f"repeated tests ({self.count} runs each)")
        failures = sorted(((*repeat_run_of(nodeid), phase) for nodeid, phase in self.failed.items()),
                          key=lambda row: (row[0], row[1]))
        for test, run, phase in failures:
            nodeid = next(n for n in self.failed if repeat_run_of(n) == (test, run))
            write(f"FAILED {test} run {run} of {self.count} ({phase}) in {self.duration[nodeid]:.1f} s")
        runs: dict[str, list[str]] = defaultdict(list)
        for nodeid in self.duration:
            runs[repeat_run_of(nodeid)[0]].append(nodeid)
        for test in sorted(runs):
            done = [n for n in runs[test] if n in self.finished]
            passed = sum(1 for n in done if n not in self.failed)
            times = [self.duration[n] for n in done] or [0.0]
            write(f"{test}: passed {passed} of {self.count} (ran {len(done)}; {min(times):.1f}-{max(times):.1f} s)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("repeat_count") > 1 and config.getoption("repeat_id") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Runs(config), "repeat-runs")
