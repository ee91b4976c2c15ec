"""kombu's filesystem transport (the embedded default's broker: no REDIS_URL), with each message written whole before
a worker can see it.

kombu opens the message file under its final name, then locks it and writes it; the worker lists the folder, moves
the file away and reads it without a lock. A worker that polled between the open and the write read an empty file:
`json.loads("")` raised in the worker's consumer loop ("Unrecoverable error: JSONDecodeError"), the worker exited,
and scripts/demo.sh stopped with it; the message was lost. At kombu's default 1 s polling this was rare; at 0.1 s
(CELERY_POLLING_INTERVAL) a fresh-clone CI run's demo hit it (issue 44). Here a message is written under a name the
worker does not pick up (no `.msg` suffix), then renamed to its final name in one step (os.replace: atomic within a
folder), so the worker only ever lists complete messages.

The worker's loop for a polling transport (Celery's synloop) waits in `drain_events` up to 2 s at a time and only
then sees that it was asked to stop: Ctrl-C on the demo waited for it, then for the pool's threads, past the grace
scripts/_children.sh gives a warm shutdown (about 7 s to stop an idle worker, measured). Here the wait is cut in
slices and given up as soon as a shutdown was asked for.
"""

from __future__ import annotations

import os
import socket
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


DRAIN_SLICE_S = 0.2  # how long a worker asked to stop may still wait for a message


def _worker_stopping() -> bool:
    from celery.worker import state  # a worker's own state: in any other process both stay None

    # As celery.worker.state.maybe_shutdown reads them: a warm shutdown sets should_stop to the exit code, 0 (== False).
    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


class Transport(filesystem.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        """kombu's, waiting at most `timeout` (None: until a message) as before, unless the worker is stopping."""
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - monotonic()
            try:
                return super().drain_events(connection, timeout=DRAIN_SLICE_S if left is None
                                            else max(min(left, DRAIN_SLICE_S), 0.0))
            except socket.timeout:
                if _worker_stopping() or (deadline is not None and monotonic() >= deadline):
                    raise
