"""A job's artifacts and checkpoints with their sizes."""

from rich.text import Text
from textual.widgets import DataTable

from lanpool.app.views.formatting import size


class ArtifactsList(DataTable[Text]):
    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_column("PATH", key="path")
        self.add_column("SIZE", key="size")

    def show_files(self, files: list[tuple[str, int]]) -> None:
        self.clear()
        for path, n in files:
            kind = " (checkpoint)" if path.endswith((".ckpt", ".pt", ".safetensors")) else ""
            self.add_row(Text(path + kind), Text(size(n), justify="right"), key=path)
