"""The API process's one listening connection: client changes empty the token cache
(``api/auth.py``), finished jobs wake ``?wait`` requests (``api/waiting.py``), and a
consumer's registration of job types has the catalog read again (``core/type_catalog.py``)."""

from __future__ import annotations

from jobrelay.api.waiting import FinishWaiters
from jobrelay.auth import Authenticator
from jobrelay.core.type_catalog import RegisteredTypes
from jobrelay.db import channels
from jobrelay.db.listener import API_APPLICATION_NAME, Listener


class ApiNotifications:
    def __init__(
        self, auth: Authenticator, waiters: FinishWaiters, types: RegisteredTypes | None = None
    ) -> None:
        self.auth = auth
        self.waiters = waiters
        self.types = types

    async def listen(self, database_url: str) -> None:
        """Until cancelled: while the connection is down, tokens are looked up every time and
        waiters read their jobs once a second."""
        await Listener(
            database_url,
            self._missed,
            listen=channels.LISTEN_API,
            application_name=API_APPLICATION_NAME,
            on_state=self._set_listening,
            on_message=self._message,
        ).run()

    def _message(self, channel: str, payload: str) -> None:
        if channel == channels.FINISHED_CHANNEL:
            self.waiters.finished(payload)
        elif channel == channels.TYPES_CHANNEL:
            if self.types is not None:
                self.types.invalidate()
        else:
            self.auth.invalidate()

    def _missed(self) -> None:
        self.auth.invalidate()
        self.waiters.wake_all()
        if self.types is not None:
            self.types.invalidate()

    def _set_listening(self, listening: bool) -> None:
        self.auth.listening = listening
        self.waiters.set_listening(listening)
