"""Register an agent repository as an evolution target, change one, or list a project's targets; stop the agents
hot swaps started.

This is the operator's way in: any local path may be the source, and the config may set the commands, sandbox_levels,
hot_swap and scripted_fixtures, which the API and the web UI only keep as stored (evolution/services/confinement.py)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from clear.errors import ClearError
from clear.projects.selectors import project_get_by_name
from evolution.selectors import evolution_target_get, evolution_target_list
from evolution.services import evolution_target_add, evolution_target_update
from evolution.services.targets import config_parse


def _error(exc: ClearError) -> CommandError:
    fields = exc.extra.get("fields") or {}
    lines = [exc.message] + [f"  {name}: {problem}" for name, problem in fields.items()]
    return CommandError("\n".join(lines))


class Command(BaseCommand):
    help = ("Evolution targets: `add` registers a repository (its evolution.json or --config), `update` changes one, "
            "`list` shows them, `stop-agents` stops the agents hot swaps started.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="register a repository")
        add.add_argument("--project", required=True, help="project name or slug")
        add.add_argument("--name", required=True)
        add.add_argument("--source", required=True, help="local repository path or git URL")
        add.add_argument("--config", help="JSON file with the evolution config (default: the repo's evolution.json)")
        add.add_argument("--default-branch", default="", help="branch or ref to evolve (default: the source's HEAD)")
        add.add_argument("--push-url", default="", help="where PR branches are pushed (default: the source)")
        update = sub.add_parser("update", help="change a target (what is not given stays as it is)")
        update.add_argument("--project", required=True, help="project name or slug")
        update.add_argument("--name", required=True, help="the target's name or id")
        update.add_argument("--source", help="local repository path or git URL")
        update.add_argument("--config", help="JSON file with the whole evolution config")
        update.add_argument("--default-branch")
        update.add_argument("--push-url")
        listing = sub.add_parser("list", help="list a project's targets")
        listing.add_argument("--project", required=True)
        sub.add_parser("stop-agents", help="stop the agents hot swaps started (every target's; scripts/demo.sh "
                                           "runs it when it stops)")

    def handle(self, *args, **options):
        if options["action"] == "stop-agents":
            from evolution.services.hot_swap import hot_swap_agents_stop

            for pid in hot_swap_agents_stop():
                self.stdout.write(f"stopped the hot-swapped agent (pid {pid})")
            return
        try:
            project = project_get_by_name(name=options["project"])
        except ClearError as exc:
            raise CommandError(f"{exc.message}. Create it with `manage.py create_project` or check the name.") from None
        if options["action"] == "list":
            for target in evolution_target_list(project=project):
                self.stdout.write(f"{target.pk}\t{target.name}\t{target.source}")
            return
        config = self._config(options["config"])
        try:
            if options["action"] == "update":
                target = evolution_target_update(
                    target=evolution_target_get(project=project, name_or_id=options["name"]), config=config,
                    source=options["source"], default_branch=options["default_branch"],
                    push_url=options["push_url"], operator=True)
            else:
                target = evolution_target_add(project=project, name=options["name"], source=options["source"],
                                              config=config, default_branch=options["default_branch"],
                                              push_url=options["push_url"], operator=True)
        except ClearError as exc:
            raise _error(exc) from None
        done = "changed, source" if options["action"] == "update" else "registered from"
        self.stdout.write(self.style.SUCCESS(f"Target {target.name} (id {target.pk}) {done} {target.source}"))

    def _config(self, name: str | None) -> dict | None:
        if not name:
            return None
        path = Path(name)
        if not path.is_file():
            raise CommandError(f"--config {path}: no such file")
        try:
            return config_parse(text=path.read_text(), where=str(path))
        except ClearError as exc:
            raise _error(exc) from None
