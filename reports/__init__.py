"""Results and reports: the versioned JSONL schema, merging, HTML/JUnit/Markdown/JSON, nightly history."""
