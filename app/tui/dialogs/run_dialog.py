"""The Run dialog: pick a workflow, edit its variables, nodes, runner and env, see the plan, run.

The dialog checks values itself (types come from the variables' defaults);
the plan is I/O (store, file hashes), so it asks the app with `PlanWanted`
and the app answers with `show_plan`. A workflow's variables come from the
controller (`variables`), like everything the dialog does not decide itself;
so does which secrets the run refers to and whether each is set (`secrets`:
names and set/missing only, never a value).

The env field is `run --env`: KEY=VALUE words, split as a shell would (quote a
value with spaces), checked by the same rules (app/runs/env_overrides.py).

It opens on the workflow picker; Enter in any field runs (as ctrl+r). Under 32
lines (an 80x24 terminal) every field is one line high (Textual's compact
widgets), so that the whole dialog, plan and buttons included, shows without
scrolling.
"""

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from lanpool.app.errors import LanpoolError, UsageError
from lanpool.app.runs.env_overrides import parse_env_args
from lanpool.app.workflows import Project
from lanpool.app.workflows.model import Scalar
from lanpool.app.workflows.resolve import coerce_override, render_value


@dataclass(frozen=True)
class RunRequest:
    workflow: str
    overrides: dict[str, str] = field(default_factory=dict)
    nodes: int | None = None
    runner: str | None = None
    no_cache: bool = False
    env: dict[str, str] = field(default_factory=dict)  # `--env`: over the workflow's env
    reuse: bool = False  # `--reuse`: the requested workflow too is reused when its inputs are unchanged


SecretsOf = Callable[[Project, str, dict[str, str]], list[tuple[str, bool]]]  # (name, set?) per secret used


class RunDialog(ModalScreen[RunRequest | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+r", "submit", "Run")]

    @dataclass
    class PlanWanted(Message):
        dialog: "RunDialog"
        request: RunRequest

    def __init__(
        self,
        project: Project,
        runners: list[str],
        variables: Callable[[Project, str], dict[str, Scalar]],
        workflow: str | None = None,
        secrets: SecretsOf | None = None,
    ) -> None:
        super().__init__()
        self.project = project
        self.runners = runners
        self._variables_of = variables
        self._secrets_of = secrets
        names = list(project.workflows)
        self.workflow = workflow if workflow in project.workflows else names[0]
        self._defaults: dict[str, Scalar] = {}

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog run-dialog"):
            # The body scrolls and the buttons stay: on a 24-line terminal they are never clipped.
            with VerticalScroll(id="run-body"):
                yield Label(f"Run a workflow of {self.project.root}", classes="title")
                yield Select(
                    [(self._label(n), n) for n in self.project.workflows],
                    value=self.workflow,
                    allow_blank=False,
                    id="workflow",
                )
                yield Static("", id="workflow-help", classes="hint")
                with VerticalScroll(id="variables"):
                    pass
                with Horizontal(classes="row"):
                    yield Label("nodes")
                    yield Input(value="", placeholder="from the workflow", id="nodes", type="integer")
                    yield Checkbox("no cache", id="no-cache")
                    yield Checkbox(
                        "reuse", id="reuse", tooltip="reuse an earlier run of this workflow with the same inputs"
                    )
                with Horizontal(classes="row"):
                    yield Label("runner")
                    yield Select(
                        [("auto (best fit)", "")] + [(r, r) for r in self.runners],
                        value="",
                        allow_blank=False,
                        id="runner",
                    )
                    yield Label("env")
                    yield Input(value="", placeholder="KEY=VALUE ...  (as --env)", id="env")
                yield Static("", id="secrets", classes="hint")  # shown once the run uses a secret
                yield Label("plan", classes="section")
                yield Static("…", id="plan")
            yield Label("", id="run-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Run (ctrl+r)", variant="success", id="run")
                yield Button("Cancel", id="cancel")

    def _label(self, name: str) -> str:
        helptext = self.project.workflows[name].help
        return f"{name}  {helptext}" if helptext else name

    async def on_mount(self) -> None:
        # The scrolling boxes take no focus of their own: Tab goes from the workflow to its first
        # variable (a field focused inside a box scrolls it into view).
        for box in self.query(VerticalScroll):
            box.can_focus = False
        self._fit()
        await self._show_variables()
        self.query_one("#workflow", Select).focus()  # else nothing has it: Enter did nothing, Tab twice to a field

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The body gets the screen's height less the frame, the error line and the buttons."""
        small = self.size.height < 32
        self.set_class(small, "-small")
        for widget in self.query("Input, Select, Checkbox, Button"):
            widget.compact = small  # type: ignore[attr-defined]
        frame = 2 + (0 if small else 2) + 1 + (3 if small else 4) + 4  # border, padding, error, buttons, margins
        self.query_one("#run-body").styles.max_height = max(4, self.size.height - frame)

    async def _show_variables(self) -> None:
        wf = self.project.workflows[self.workflow]
        self.query_one("#workflow-help", Static).update(wf.help or "")
        box = self.query_one("#variables", VerticalScroll)
        await box.remove_children()
        # Defaults come from the workflow files, where a variable's value is a scalar.
        self._defaults = self._variables_of(self.project, self.workflow)
        rows: list[Widget] = []
        for name, default in sorted(self._defaults.items()):
            kind = type(default).__name__ if default is not None else "str"
            rows.append(
                Horizontal(
                    Label(f"{name} ({kind})", classes="var-name"),
                    Input(
                        value=render_value(default),
                        id=_var_id(name),
                        classes="var-value",
                        compact=self.has_class("-small"),
                    ),
                    classes="var-row",
                )
            )
        if not rows:
            rows.append(Label(f"no variables (define them in {self.project.variables_path})", classes="hint"))
        await box.mount_all(rows)
        self.want_plan()

    @on(Select.Changed, "#workflow")
    async def _workflow_changed(self, event: Select.Changed) -> None:
        if event.value != self.workflow:
            self.workflow = str(event.value)
            await self._show_variables()

    @on(Input.Changed)
    @on(Checkbox.Changed)
    @on(Select.Changed, "#runner")
    def _changed(self) -> None:
        self.want_plan()

    def want_plan(self) -> None:
        request = self.request(quiet=True)
        if request is not None:
            self.post_message(self.PlanWanted(self, request))

    def show_plan(self, text: str) -> None:
        try:
            plan = self.query_one("#plan", Static)
        except NoMatches:  # the plan came after a quick ctrl+r closed the dialog
            return
        plan.update(text)

    def request(self, quiet: bool = False) -> RunRequest | None:
        """The run asked for, or None (with the reason shown) when a value is wrong."""
        error = self.query_one("#run-error", Label)
        overrides = {}
        try:
            for name, default in self._defaults.items():
                widgets = self.query(f"#{_var_id(name)}")
                if not widgets:
                    continue
                text = widgets.first(Input).value
                if text != render_value(default):
                    coerce_override(name, text, default)  # raises on a wrong type
                    overrides[name] = text
            nodes_text = self.query_one("#nodes", Input).value.strip()
            nodes = int(nodes_text) if nodes_text else None
            if nodes is not None and nodes < 1:
                raise LanpoolError("nodes must be 1 or more")
            env = self._env()
        except LanpoolError as exc:
            error.update(exc.message)
            return None
        except ValueError:
            error.update("nodes must be a whole number")
            return None
        error.update("")
        self._show_secrets(env)
        runner = self.query_one("#runner", Select).value
        return RunRequest(
            self.workflow,
            overrides,
            nodes,
            str(runner) if runner else None,
            self.query_one("#no-cache", Checkbox).value,
            env,
            self.query_one("#reuse", Checkbox).value,
        )

    def _env(self) -> dict[str, str]:
        text = self.query_one("#env", Input).value
        try:
            words = shlex.split(text)
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"env: {exc}: KEY=VALUE words, a value with spaces in quotes") from None
        try:
            return parse_env_args(words)
        except LanpoolError as exc:
            raise UsageError(f"env: {exc.message}") from None

    def _show_secrets(self, env: dict[str, str]) -> None:
        """Which `${{ secrets.NAME }}` this run uses, set or missing on this controller (never a value)."""
        if self._secrets_of is None:
            return
        text = Text()
        try:
            used = self._secrets_of(self.project, self.workflow, env)
        except LanpoolError as exc:  # an unreadable secrets file: its own line (a Text: a path is no markup)
            text.append(f"secrets: {exc.message}", style="red")
            used = []
        for i, (name, known) in enumerate(used):
            text.append("secrets: " if i == 0 else ", ")
            text.append(f"{name} ")
            text.append("set" if known else "missing", style="green" if known else "bold red")
        missing = [name for name, known in used if not known]
        if missing:
            text.append(f"  (`app headless secrets set {missing[0]}` on this machine)")
        box = self.query_one("#secrets", Static)
        box.update(text)
        box.display = bool(text)  # no line at all for a run that uses no secret

    def action_submit(self) -> None:
        request = self.request()
        if request is not None:
            self.dismiss(request)

    @on(Input.Submitted)
    def _enter(self) -> None:
        self.action_submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.action_submit()
        else:
            self.dismiss(None)


def _var_id(name: str) -> str:
    """A widget id for variable `name`: ids take no `.` (dstack's `learning.rate`), so such a name goes in hex."""
    return f"var-{name}" if "." not in name else "var-x" + name.encode().hex()
