"""The GPU side: NVML access, power caps and clock locks, the journal that owns a GPU's original setting, per-GPU locks."""
