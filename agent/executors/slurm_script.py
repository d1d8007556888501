"""What a lanpool job is to Slurm: a batch script (lanpool's wrapper), a per-node script, the commands.

All three are files in the job's Slurm directory (on storage every node sees).
Nothing from the request is pasted into shell text unquoted: the commands are
the job's own script, the paths are quoted with shlex, and every sbatch option
is one argv element (agent.executors.slurm).

The wrapper is the batch script. It runs the job in its own process group and
outlives a SIGTERM (`scancel --full --signal=TERM`) to enforce lanpool's grace
period itself (Slurm's KillWait is the cluster's, not the job's): TERM to the
group, KILL after the grace. Its last act is the exit-code file, since a cluster
may have no accounting database to ask afterwards.
"""

import shlex
from pathlib import Path

EXIT_FILE = "exit"  # the job's exit code, written last by the wrapper (atomically)
OUT_FILE = "slurm.out"
ERR_FILE = "slurm.err"
ID_FILE = "slurm_job_id"  # written right after sbatch: an agent restart re-adopts the job by it

# $1 job's Slurm dir, $2 grace seconds, $3 nodes. The 127 test: a wait interrupted by
# the trap, then a second wait on a child already collected (see agent/executors/docker.py).
_BATCH = """\
#!/bin/bash
dir=$1 grace=$2 nodes=$3
stopping= interrupted= child=
term() {
  interrupted=1
  [ -n "$stopping" ] && return
  stopping=1
  [ -n "$child" ] || return
  kill -TERM -- -"$child" 2>/dev/null
  ( sleep "$grace"; kill -KILL -- -"$child" 2>/dev/null ) &
}
trap term TERM INT
if [ "$nodes" -gt 1 ]; then
  # node 0's free port for torch.distributed's rendezvous; the job id decides when python3 is missing
  MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])' \\
    2>/dev/null) || MASTER_PORT=$((20000 + ${SLURM_JOB_ID:-0} % 30000))
  export MASTER_PORT
  # one task per node; a node that fails ends the others (fail-fast, as on the LAN)
  setsid srun --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 --kill-on-bad-exit=1 \\
    bash "$dir/node.sh" &
else
  setsid bash "$dir/node.sh" &
fi
child=$!
[ -n "$stopping" ] && { stopping=; term; }
code=
while :; do
  interrupted=
  wait "$child"; status=$?
  if [ "$status" = 127 ] && [ -n "$code" ] && ! kill -0 "$child" 2>/dev/null; then break; fi
  code=$status
  [ -z "$interrupted" ] && break
done
printf '%s\\n' "$code" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
exit "$code"
"""


def node_script(working_dir: Path, commands_file: Path) -> str:
    """One node's part: lanpool's env contract from Slurm's variables, then the job's commands.

    Lightning sees SLURM_NTASKS and takes over (demanding --ntasks-per-node =
    devices): those variables go, and MASTER_ADDR/NODE_RANK say what the LAN
    contract says (docs/multi-node.md). MASTER_ADDR is the allocation's first host.
    """
    return f"""\
#!/bin/bash
export NODE_RANK=${{SLURM_NODEID:-0}} LANPOOL_NODE_RANK=${{SLURM_NODEID:-0}}
export LANPOOL_NUM_NODES=${{SLURM_JOB_NUM_NODES:-1}} LANPOOL_SLURM_JOB_ID=${{SLURM_JOB_ID:-}}
if [ "${{SLURM_JOB_NUM_NODES:-1}}" -gt 1 ]; then
  hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
  first=${{hosts%%$'\\n'*}}
  export MASTER_ADDR=$first LANPOOL_MASTER_ADDR=$first LANPOOL_NODES_IPS=$(echo $hosts | tr ' ' ,)
  export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-1}}
  # "[node K] " before each line, as the controller tags a LAN gang's nodes. The taggers
  # ignore TERM (a stop signals every process of the job): they end when the job closes its
  # output. They are a pipeline the node script waits for: a failing node's last lines are
  # written before srun (--kill-on-bad-exit) sees it end and kills the job's processes.
  tag() {{ trap '' TERM; exec sed -u "s/^/[node $NODE_RANK] /"; }}
fi
unset SLURM_NTASKS SLURM_NPROCS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE SLURM_STEP_NUM_TASKS
cd {shlex.quote(str(working_dir))} || exit 1
if [ "${{SLURM_JOB_NUM_NODES:-1}}" -gt 1 ]; then
  # A stop's TERM is the commands' to act on: this script (and the group) wait for them and
  # their tagged output (a trap, not an ignore: the commands must not inherit it).
  trap : TERM
  set -o pipefail  # the commands' exit status, not the taggers'
  {{ trap : TERM; bash {shlex.quote(str(commands_file))} 2>&1 1>&3 3>&- | tag >&2; }} 3>&1 | tag
  exit
fi
exec bash {shlex.quote(str(commands_file))}
"""


def write_scripts(slurm_dir: Path, working_dir: Path, commands: list[str]) -> Path:
    """The three files in `slurm_dir`; the batch script's path."""
    slurm_dir.mkdir(parents=True, exist_ok=True)
    commands_file = slurm_dir / "commands.sh"
    # set -e: a failing command ends the job with its exit code, as the process executor does.
    commands_file.write_text("set -e\n" + "\n".join(commands) + "\n")
    (slurm_dir / "node.sh").write_text(node_script(working_dir, commands_file))
    batch = slurm_dir / "batch.sh"
    batch.write_text(_BATCH)
    return batch
