"""EHR readers: each turns one source layout into the common long table of diagnosis codes and the labels (see common.py)."""
