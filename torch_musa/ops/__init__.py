"""The operator layer: which ops musa serves and how."""
