"""The safety filter: pluggable checks (rules, PII, a classifier) run async or blocking per route."""
