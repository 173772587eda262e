"""Evaluation: tests of a pretrained model and its fine-tuned runs, statistics, plots, the experiment protocol and its report."""
