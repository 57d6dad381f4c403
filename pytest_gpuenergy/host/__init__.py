"""The host's own energy: its CPU packages and DRAM through Linux powercap (RAPL), measured beside
the GPUs (``--energy-domains=gpu,cpu,dram``). ``powercap`` finds and reads the zones; ``recorder``
follows their counters through a session so that no wrap goes unseen."""
