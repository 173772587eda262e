"""`hrrbert transfer`: see pipelines/ontology/transfer.py."""

COMMANDS: list = []
