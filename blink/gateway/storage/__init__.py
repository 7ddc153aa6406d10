"""What the gateway's durable stores share: SQL plumbing and the store-error counter."""
