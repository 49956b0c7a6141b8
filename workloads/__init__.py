"""tpuray.workloads: the PyTorch/XLA Ray entrypoint that runs one worker per TPU chip. Imports no Pulumi."""
