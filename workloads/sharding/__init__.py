"""Sharded training (FSDP, tensor parallelism) over a slice's mesh."""
