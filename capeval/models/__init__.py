"""One folder per model family, like transformers' ``models/<name>/``: configuration, modeling and loading side by side."""
