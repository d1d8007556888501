"""One job on its runners (a gang of 1..N nodes): submit, follow, end; what multi-node and Slurm jobs add."""
