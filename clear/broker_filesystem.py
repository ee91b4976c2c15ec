"""kombu's filesystem transport (the embedded default's broker: no REDIS_URL), with each message written whole before
a worker can see it.

kombu opens the message file under its final name, then locks it and writes it; the worker lists the folder, moves
the file away and reads it without a lock. A worker that polled between the open and the write read an empty file:
`json.loads("")` raised in the worker's consumer loop ("Unrecoverable error: JSONDecodeError"), the worker exited,
and scripts/demo.sh stopped with it; the message was lost. At kombu's default 1 s polling this was rare; at 0.1 s
(CELERY_POLLING_INTERVAL) a fresh-clone CI run's demo hit it (issue 44). Here a message is written under a name the
worker does not pick up (no `.msg` suffix), then renamed to its final name in one step (os.replace: atomic within a
folder), so the worker only ever lists complete messages.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # `<…>.<queue>.msg.part`: not the `.<queue>.msg` suffix the worker looks for
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            try:
                os.unlink(partial)
            except OSError:
                pass
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
