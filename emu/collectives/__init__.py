"""Collectives over MetaRoCE: the ring's ranks (rank.py), their job inside the engine (job.py), and the
runner that starts them (run.py)."""

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "alltoallv", "sendrecv")  # what `emu bench collective` runs
