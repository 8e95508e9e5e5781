"""Which tier answers, and how sure it was: the rule router, its evaluation, confidence, risk."""
