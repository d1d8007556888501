"""A workflow's `slurm:` (partition, account, qos, constraint): read, sent as resources, and
refused with the key's line when a name holds a shell character or reads as an option."""

import textwrap
from pathlib import Path

import pytest

from lanpool.app.workflows import WorkflowError
from lanpool.app.workflows.resolve import resolve
from tests.workflow_files import load_strict


def _project(root: Path, slurm: str, variables: str = ""):
    (root / ".lanpool").mkdir(parents=True)
    if variables:
        (root / ".lanpool" / "variables.yaml").write_text(variables)
    (root / ".lanpool" / "workflows.yaml").write_text(
        textwrap.dedent(
            """\
            workflows:
              - name: train
                commands: [echo hi]
                resources: {gpu: 1}
            """
        )
        + textwrap.indent(slurm, "    ")
    )
    return load_strict(root)


def test_slurm_names_reach_the_runner_as_resources(tmp_path: Path):
    project = _project(tmp_path, "slurm: {partition: gpu-a100, account: ml_team, qos: normal, constraint: 'a100&ib'}\n")
    job = resolve(project, "train", {}, {})
    assert job.resources == {
        "gpu": 1,
        "slurm_partition": "gpu-a100",
        "slurm_account": "ml_team",
        "slurm_qos": "normal",
        "slurm_constraint": "a100&ib",
    }


@pytest.mark.parametrize(
    "slurm",
    [
        "slurm: {partition: 'x --wrap=rm'}\n",
        "slurm: {account: '-A root'}\n",
        "slurm: {qos: 'normal;id'}\n",
        "slurm: {constraint: 'a b'}\n",
        "slurm: {partitoin: gpu}\n",
        "slurm: gpu\n",
    ],
)
def test_bad_slurm_names_are_refused_at_their_line(tmp_path: Path, slurm: str):
    with pytest.raises(WorkflowError) as err:
        _project(tmp_path, slurm)
    assert err.value.line == 5 and "slurm" in str(err.value) and "\n" not in str(err.value)


def test_a_variable_that_substitutes_to_a_bad_name_is_refused(tmp_path: Path):
    project = _project(tmp_path, "slurm: {partition: '${{ part }}'}\n", "variables:\n  global:\n    part: gpu\n")
    assert resolve(project, "train", {}, {}).resources["slurm_partition"] == "gpu"
    with pytest.raises(Exception) as err:
        resolve(project, "train", {"part": "x --wrap=id"}, {})
    assert "slurm.partition" in str(err.value)
