"""Wire types and errors: OpenAI schemas and BlinkError. No logic lives here."""
