"""Data: EHR readers (MIMIC-IV, eICU, MEDS, OMOP CDM), tokenization against a program, splits, the tokenized
dataset format 1 and its reader for training. See docs/dataset-format.md."""
