"""The TUI's keys as a user meets them: the bindings (app/tui/app.py hands each to the pane it
is for) and the `?` help's rows, side by side so that a key added to one is added to the other
(tests/unit/test_tui_keys.py checks that every key bound here has a help row)."""

from textual.binding import Binding, BindingType

BINDINGS: list[BindingType] = [
    Binding("1", "tab('runs')", "Runs"),
    Binding("2", "tab('runners')", "Runners"),
    Binding("3", "tab('logs')", "Logs"),
    Binding("4", "tab('metrics')", "Metrics"),
    Binding("5", "tab('artifacts')", "Artifacts"),
    Binding("r", "run", "Run"),
    Binding("s", "stop", "Stop"),
    Binding("x", "abort", "Abort", show=False),
    Binding("e", "shell", "Shell"),
    Binding("slash", "search", "Filter/Search"),
    Binding("d", "download", "Download", show=False),
    Binding("D", "delete_run", "Delete run", show=False),
    Binding("w", "save_log", "Save log", show=False),
    Binding("c", "copy_log", "Copy log", show=False),
    Binding("left_square_bracket", "node(-1)", "Prev node", show=False),
    Binding("right_square_bracket", "node(1)", "Next node", show=False),
    Binding("p", "pair", "Pair", show=False),
    Binding("plus,a", "add_runner", "Add runner", show=False),
    Binding("minus,delete", "remove_runner", "Remove runner", show=False),
    Binding("F", "forget_offline", "Forget offline runners", show=False),
    Binding("question_mark", "help", "Help"),
    Binding("q", "quit", "Quit"),
]

KEYS_HELP = [
    ("1 2 3 4 5", "Runs, Runners, Logs, Metrics, Artifacts"),
    ("Enter", "open the selected job's log (Runs)"),
    ("j / k, g / G", "Runs, Runners: down / up, first / last row (also Home / End)"),
    ("r", "run a workflow (dialog: variables, nodes, runner, plan)"),
    ("s / x", "stop / abort the selected job (asks first)"),
    ("e", "a shell in the selected running job (on the node the log shows); exit it to come back"),
    ("/", "Runs: filter by text; Logs: search the log (n / N: next / previous match)"),
    ("[ ]", "Logs: show one node / all nodes (multi-node jobs)"),
    ("g / G", "Logs: top (pages older lines in from the store) / follow the end"),
    ("t", "Logs: show / hide each line's arrival time (the runner's clock)"),
    ("space / l / m", "Metrics: show or hide a metric / log scale / smoothing (off, 0.6, 0.9)"),
    ("space / u", "Runs: mark / unmark the job, unmark all (Metrics overlays the marked jobs)"),
    ("o / O", "Metrics of a sweep or of marked jobs: the next / previous metric overlaid"),
    ("w / c", "Logs: save the whole log to a file / copy the shown lines"),
    ("d", "download the selected job's artifacts to a directory"),
    ("D", "delete the selected job's run: its jobs, logs, artifacts (asks first)"),
    ("p / a / -", "Runners: pair (with the runner's code) / add by address / remove"),
    ("F", "Runners: forget every OFFLINE runner (asks first)"),
    ("ctrl+p", "command palette"),
    ("?", "this help"),
    ("q", "quit (jobs keep running on their runners)"),
]
