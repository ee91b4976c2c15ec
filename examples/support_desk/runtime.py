"""A tiny discrete-event scheduler on virtual time.

Agents are written as generators. They `yield Sleep(ms)` to let virtual time pass
(a model generating tokens, a backend answering) and `yield Gather([...])` to run
sub-processes concurrently and resume with their results in order. Nothing waits on
the wall clock, so a whole support ticket runs in microseconds and every run with the
same seed replays the same interleaving at the same virtual instants.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

NS_PER_MS = 1_000_000
# Agent-side durations (model latency, back-off) are whole ticks; see backend.ENDPOINT_SKEW_MS.
TICK_MS = 10


@dataclass(frozen=True)
class Sleep:
    """Suspend the current process for `ms` virtual milliseconds."""

    ms: int


@dataclass(frozen=True)
class Gather:
    """Start every process now and resume the caller with their results, in order."""

    processes: Sequence[Generator[Any, Any, Any]]


Command = Sleep | Gather
Process = Generator[Command, Any, T]


@dataclass(eq=False)
class _Task:
    generator: Generator[Any, Any, Any]
    parent: _Task | None = None
    slot: int = 0
    # Filled while this task waits on a Gather.
    pending: int = 0
    child_results: list[Any] = field(default_factory=list)
    result: Any = None
    done: bool = False


class Scheduler:
    """Runs processes in (virtual time, arrival order), which makes runs reproducible."""

    def __init__(self, start_ns: int) -> None:
        self._now_ns = start_ns
        self._queue: list[tuple[int, int, _Task, Any]] = []
        self._sequence = itertools.count()

    @property
    def now_ns(self) -> int:
        return self._now_ns

    def advance(self, ms: int) -> None:
        """Move the clock outside of any process (work done before or after a run)."""
        self._now_ns += ms * NS_PER_MS

    def run(self, main: Process[T]) -> T:
        root = _Task(main)
        self._wake(root, None, at_ns=self._now_ns)
        while self._queue:
            at_ns, _, task, value = heapq.heappop(self._queue)
            self._now_ns = at_ns
            self._step(task, value)
        if not root.done:
            raise RuntimeError("scheduler ran dry before the main process finished")
        return root.result

    def _wake(self, task: _Task, value: Any, *, at_ns: int) -> None:
        heapq.heappush(self._queue, (at_ns, next(self._sequence), task, value))

    def _step(self, task: _Task, value: Any) -> None:
        try:
            command = task.generator.send(value)
        except StopIteration as stop:
            self._finish(task, stop.value)
            return
        if isinstance(command, Sleep):
            if command.ms < 0:
                raise ValueError(f"cannot sleep a negative duration: {command.ms} ms")
            self._wake(task, None, at_ns=self._now_ns + command.ms * NS_PER_MS)
        elif isinstance(command, Gather):
            children = list(command.processes)
            if not children:
                self._wake(task, [], at_ns=self._now_ns)
                return
            task.pending = len(children)
            task.child_results = [None] * len(children)
            for slot, generator in enumerate(children):
                self._wake(_Task(generator, parent=task, slot=slot), None, at_ns=self._now_ns)
        else:
            raise TypeError(f"a process yielded {command!r}; expected Sleep or Gather")

    def _finish(self, task: _Task, result: Any) -> None:
        task.done = True
        task.result = result
        parent = task.parent
        if parent is None:
            return
        parent.child_results[task.slot] = result
        parent.pending -= 1
        if parent.pending == 0:
            results, parent.child_results = parent.child_results, []
            self._wake(parent, results, at_ns=self._now_ns)
