"""Clinical question answering with memory networks: the QA data generator, training and evaluation, the
comparison grid."""
