"""Faults and load: real servers (gunicorn, uvicorn), Redis outages, soak, flood, exactness."""
