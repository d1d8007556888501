"""Metrics a script logs with Lightning's CSVLogger or TensorBoardLogger reach `metrics --json`
with no change to the script: real Lightning on CPU, a real agent."""

import json

import pytest

FIT = """
import sys, warnings
import torch
import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

warnings.filterwarnings("ignore")


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, _i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(0)
x = torch.randn(32, 4)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
logger = CSVLogger(".") if sys.argv[1] == "csv" else TensorBoardLogger(".")
trainer = L.Trainer(max_epochs=2, logger=logger, log_every_n_steps=1, accelerator="cpu", devices=1,
                    enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
trainer.fit(Tiny(), data, data)
print("fitted")
"""


def _points(cli, make_project, agent, kind: str) -> list[dict]:
    project = make_project(f"workflows:\n  - name: fit\n    commands: [python fit.py {kind}]\n", files={"fit.py": FIT})
    res = cli("headless", "run", "fit", "--runner", agent.address, cwd=project, timeout=240)
    assert res.returncode == 0, res.stderr
    assert "fitted" in res.stdout
    run = res.stderr.split()[1].rstrip(":")
    return json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)


@pytest.mark.parametrize("kind", ["csv", "tb"])
def test_lightning_logger_files_reach_metrics_json(agent, cli, make_project, kind):
    points = _points(cli, make_project, agent, kind)
    train = [p for p in points if p["name"] == "train_loss"]
    val = [p for p in points if p["name"] == "val_loss"]
    assert len(train) == 8, points  # 4 batches x 2 epochs, logged every step, each once
    assert [p["step"] for p in train] == sorted(p["step"] for p in train)
    assert len(val) == 2 and all(isinstance(p["value"], float) for p in val)
    assert not [p for p in points if p["name"] == "epoch"]  # the epoch is a field, not a metric


def test_logger_files_that_are_links_or_fifos_are_not_read(agent, cli, make_project, tmp_path):
    host_key = (agent.data_dir / "host_key").resolve()
    outside = tmp_path / "outside.csv"  # a file of the runner's, readable as metrics if a link were followed
    outside.write_text("step,secret\n1,42\n")
    project = make_project(f"""
workflows:
  - name: hostile
    commands:
      - mkdir -p logs/a logs/b
      - ln -s {host_key} logs/a/events.out.tfevents.1.x
      - ln -s {outside} logs/a/metrics.csv
      - mkfifo logs/b/metrics.csv
      - sleep 6
      - echo done
""")
    res = cli("headless", "run", "hostile", "--runner", agent.address, cwd=project, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "done\n"  # the agent did not hang on the FIFO, at the polls or the final read
    run = res.stderr.split()[1].rstrip(":")
    assert json.loads(cli("headless", "metrics", run, "--json", check=True).stdout) == []
