"""What a reader sees: tables, charts, labels and the page, and their saved files; what they
show is computed in kit.stats."""
