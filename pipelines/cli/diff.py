"""`hrrbert diff`: see pipelines/ontology/diff.py."""

COMMANDS: list = []
