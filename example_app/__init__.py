"""An example FastAPI app whose schedules live beside its route modules (``*_cron.py``)."""
