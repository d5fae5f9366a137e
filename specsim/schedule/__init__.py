"""Width-to-depth schedules: tuning one on a trace, and writing it for the serving engines."""
