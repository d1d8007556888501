"""Lightning recipes that run inside lanpool jobs.

autoencoder (digits), chargpt (a character-level GPT with snapshots) and
gpt2_finetune (a HuggingFace GPT-2 with the real BPE, offline), each run as
`python -m training.<recipe>`; metrics (the JSON-lines logger the agent tails),
runtime (nodes, DDP timeout, threads) and cli_config (typed options) serve them.
Nothing here imports app or agent.
"""
