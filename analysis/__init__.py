"""Analysis: read what a run brought back and turn it into metrics and a verdict."""
