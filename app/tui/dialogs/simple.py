"""Small modal dialogs: confirm, a form of text fields, the help screen."""

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class ConfirmDialog(ModalScreen[bool]):
    BINDINGS = [Binding("escape,n", "dismiss(False)", "No"), Binding("y", "dismiss(True)", "Yes")]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


@dataclass(frozen=True)
class Field:
    name: str
    label: str
    value: str = ""
    placeholder: str = ""
    password: bool = False


class FormDialog(ModalScreen[dict[str, str] | None]):
    """A few labelled inputs; Enter in the last one (or OK) answers {name: text}."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, fields: list[Field], ok: str = "OK") -> None:
        super().__init__()
        self.title_text = title
        self.fields = fields
        self.ok = ok

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="title")
            for f in self.fields:
                yield Label(f.label)
                yield Input(value=f.value, placeholder=f.placeholder, password=f.password, id=f"field-{f.name}")
            yield Label("", id="form-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button(self.ok, variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def answer(self) -> dict[str, str]:
        return {f.name: self.query_one(f"#field-{f.name}", Input).value.strip() for f in self.fields}

    def on_input_submitted(self, event: Input.Submitted) -> None:
        inputs = list(self.query(Input))
        if event.input is inputs[-1]:
            self._finish()
        else:
            inputs[inputs.index(event.input) + 1].focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self._finish()
        else:
            self.dismiss(None)

    def _finish(self) -> None:
        answer = self.answer()
        missing = [f.label for f in self.fields if not answer[f.name]]
        if missing:
            self.query_one("#form-error", Label).update(f"{missing[0]} is needed")
            return
        self.dismiss(answer)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss(None)", "Close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        width = max((len(k) for k, _ in self.keys), default=4) + 2
        text = "\n".join(f"[b]{k.ljust(width)}[/b]{d}" for k, d in self.keys)
        with VerticalScroll(classes="dialog help"):
            yield Label("lanpool keys", classes="title")
            yield Static(text)
            yield Label("Ctrl+P: command palette (every action).  Mouse: click tabs, rows and buttons.", classes="hint")
