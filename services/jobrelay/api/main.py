"""``uvicorn jobrelay.api.main:app`` entry point (used when JOBRELAY_API_WORKERS > 1)."""

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings
from jobrelay.logs import configure_logging

_settings = Settings()
configure_logging("api", _settings.log_level)
app = create_app(_settings)
