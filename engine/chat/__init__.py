"""Conversations and turns: token-exact sessions, the window, targets, summaries, export, and the
Assistant that ties them together. Front-ends reach it only through engine.api."""
