"""fastapi-voltro-schedules."""
