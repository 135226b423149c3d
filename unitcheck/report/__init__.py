"""Report formats: text, json, sarif, junit, github, dot."""
