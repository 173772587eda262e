"""Doctor2Vec: doctor-trial matching data, the trainer, evaluation and the comparison report."""
