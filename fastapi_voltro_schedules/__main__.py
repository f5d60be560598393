"""``python -m fastapi_voltro_schedules`` — the ``voltro`` command line."""

from fastapi_voltro_schedules.cli import main

if __name__ == "__main__":
    main()
