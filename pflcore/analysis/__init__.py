"""Tables, curves and plots for notebooks. The only part of pflcore that uses matplotlib,
imported lazily so that the core never needs it."""
