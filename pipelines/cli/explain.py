"""`hrrbert explain`: see pipelines/ontology/explain.py."""

COMMANDS: list = []
