"""Plans: versioned records of every template's binding and proven bound, as JSON."""
