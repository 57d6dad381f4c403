"""Reports of a session's or a comparison's results: terminal, Markdown, HTML, JSON."""
