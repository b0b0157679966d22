"""What a reader sees: tables, charts and their saved files, and label-free diagnostics of
representations (RankMe, alpha-ReQ, linear CKA)."""
