"""What `bamasc serve` and `bamasc proxy` share over HTTP: connection limits, request reading, authentication."""
