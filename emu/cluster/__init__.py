"""One fabric over several machines (issue 24): where each node runs, and the machines to run it on."""
