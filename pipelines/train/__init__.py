"""Training: the one training loop, masked-code pretraining, fine-tuning, checkpoints and the shared
runtime (devices, DDP, seeding, metrics log)."""
