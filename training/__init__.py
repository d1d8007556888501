"""Lightning recipes that run inside lanpool jobs."""
