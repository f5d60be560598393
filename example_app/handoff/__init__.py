"""The example app's Celery variant: the same app, plus a heavy nightly job handed to a Celery
worker instead of run in the web process (docs/handoff.md, "The example app on Celery").

No compose file: a Redis, a worker and the app, each a command::

    redis-server --daemonize yes                       # Debian: apt install redis-server
    export EXAMPLE_CELERY_REDIS_URL=redis://127.0.0.1:6379/0
    celery -A example_app.handoff.tasks worker --loglevel=INFO        # the worker
    uvicorn example_app.handoff.main:app                               # the app

Nothing here ends in ``_cron``: the default app (``example_app.main``) never discovers the
Celery schedule, and runs without a worker.
"""
