"""Results: the versioned model of what a run produced, and its storage in a record folder."""
