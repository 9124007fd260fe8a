"""``uvicorn jobrelay.api.main:app`` entry point (used when JOBRELAY_API_WORKERS > 1).

Each worker process builds its app from the environment, JOBRELAY_HANDLERS included
(``jobrelay api --handlers`` sets it for them).
"""

from jobrelay.api.app import create_app
from jobrelay.core.masking import Masker
from jobrelay.core.settings import Settings
from jobrelay.logs import configure_logging

_settings = Settings()
configure_logging("api", _settings.log_level, Masker.from_settings(_settings))
app = create_app(_settings)
