"""Local documents: parse files into text blocks with their place (page, heading, line), then chunks."""
