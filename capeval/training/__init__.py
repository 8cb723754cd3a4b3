"""Training the learned parts of metrics, one module per family (``bridge``): the top layer beside the commands,
free to use the models, scorers and benchmarks (validation correlations during training)."""
