"""The fabric, live in a browser: the topology with its links' load, queues, pauses and failures in
fabric time (emu.web.app), and the same counters for Prometheus (/metrics)."""
