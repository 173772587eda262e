"""The demo: the RF2-format demo release built from public ICD text, the synthetic cohort with known
ground truth, and the ``hrrbert demo`` job."""
