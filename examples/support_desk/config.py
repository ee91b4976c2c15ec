"""Run configuration: which planted faults are active and which model labels to report.

The three switches below guard real code paths in the agents. Each switch selects the
faulty variant of one function; the correct variant is what runs when it is off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

BUG_NAMES: tuple[str, ...] = ("mediator_race", "retry_loop", "misroute")



@dataclass(frozen=True)
class BugSwitches:
    mediator_race: bool = False
    retry_loop: bool = False
    misroute: bool = False

    @classmethod
    def all_on(cls) -> BugSwitches:
        return cls(**{name: True for name in BUG_NAMES})

    @classmethod
    def parse(cls, spec: str | Iterable[str] | BugSwitches | None) -> BugSwitches:
        """Accept `"all"`, `"none"`, `"a,b"`, an iterable of names, or an instance.

        `None` means the default, which is every switch on: the example exists to be
        diagnosed, so the faulty behaviour is what a plain run shows.
        """
        if isinstance(spec, BugSwitches):
            return spec
        if spec is None:
            return cls.all_on()
        if isinstance(spec, str):
            text = spec.strip().lower()
            if text in ("", "all"):
                return cls.all_on()
            if text == "none":
                return cls()
            names = [part.strip() for part in text.split(",") if part.strip()]
        else:
            names = [str(name).strip().lower() for name in spec]
        unknown = sorted(set(names) - set(BUG_NAMES))
        if unknown:
            raise ValueError(f"unknown switch(es): {', '.join(unknown)}; choose from {', '.join(BUG_NAMES)}")
        return cls(**{name: True for name in names})

    @property
    def enabled(self) -> tuple[str, ...]:
        return tuple(name for name in BUG_NAMES if getattr(self, name))

    def describe(self) -> str:
        return ",".join(self.enabled) or "none"


@dataclass(frozen=True)
class ModelLabels:
    """Model names written on `chat` spans. No model is called: replies are scripted."""

    planner: str = "gpt-4o"
    worker: str = "gpt-4o-mini"
    mediator: str = "gpt-4o-mini"
    writer: str = "gpt-4o"
    provider: str = "openai"

    @staticmethod
    def response_model(request_model: str) -> str:
        snapshots = {"gpt-4o": "gpt-4o-2024-08-06", "gpt-4o-mini": "gpt-4o-mini-2024-07-18"}
        return snapshots.get(request_model, request_model)


@dataclass(frozen=True)
class DeskConfig:
    bugs: BugSwitches = field(default_factory=BugSwitches.all_on)
    models: ModelLabels = field(default_factory=ModelLabels)
