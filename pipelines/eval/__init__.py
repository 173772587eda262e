"""Evaluation: tests of a pretrained model and its fine-tuned runs (declared once each in ``registry.py``,
with their typed records in ``records.py`` and report sections in ``sections.py``), statistics, plots, the
Markdown cells and tables every report uses (``markdown.py``), the experiment protocol and its report."""
