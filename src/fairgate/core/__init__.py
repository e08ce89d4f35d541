"""Pure building blocks shared by every layer: errors, durations, money."""
