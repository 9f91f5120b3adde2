"""Reports and their renderers: the report (report), terminal/Markdown/JUnit/JSON (formats), HTML (html),
charts, merging shards (merge), known-issue scope (scope), nights (trend), the host line (machine), the
checks that run before any work (preflight) and atomic writes (outputs). Torch-free."""
