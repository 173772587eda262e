"""What only HRR embeddings can do with the ontology behind them: carry a trained model over to a new
release (``carry``), take a code vector apart by unbinding (``explain``), compose a query from
(relation, atom) pairs (``query``), and compare two programs and the vectors they compose (``diff``)."""
