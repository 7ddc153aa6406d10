"""Cost accounting: prices, the spend ledger, and the budget check on the request path."""
