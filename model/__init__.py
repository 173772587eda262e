"""Models over ICD-code sequences whose token embedding is the HRR kernel (BERT, memory networks).

Nothing is exported yet: the models arrive with their issues.
"""

__all__: list[str] = []
