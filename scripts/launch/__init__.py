"""launch_job.py in parts: options, supervise, live, report (and common, what they share)."""
