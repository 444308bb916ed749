"""R11 wake-ups: places fill from the bottom, an enqueue stops at the first empty
place, and a supervisor moves down into a gap so none stays hidden."""
from __future__ import annotations

import select
import socket

import pytest

from jobpool import _core_py, core
from jobpool.store.sqlite import wakeup

pytestmark = pytest.mark.skipif(not wakeup._SUPPORTED, reason="abstract sockets are Linux only")


def woken(listener: wakeup.Listener) -> bool:
    ready, _, _ = select.select([listener.sock], [], [], 0.5)
    if ready:
        listener.drain()
    return bool(ready)


def test_listeners_take_the_lowest_free_places_and_all_are_woken(tmp_path):
    store = str(tmp_path / "w.db")
    first, second = wakeup.Listener(store), wakeup.Listener(store)
    assert (first.place, second.place) == (0, 1)
    wakeup.Notifier(store).notify()
    assert woken(first) and woken(second)
    first.close()
    second.close()


def test_a_listener_moves_down_into_the_gap_a_departed_one_left(tmp_path):
    store = str(tmp_path / "w.db")
    first, second = wakeup.Listener(store), wakeup.Listener(store)
    first.close()
    notifier = wakeup.Notifier(store)
    notifier.notify()
    assert not woken(second)  # the gap hides it: the cost of stopping early
    replaced = second.move_down()
    assert isinstance(replaced, socket.socket) and second.place == 0
    replaced.close()
    notifier.notify()
    assert woken(second)
    assert second.move_down() is None  # already at the bottom
    newcomer = wakeup.Listener(store)
    assert newcomer.place == 1
    notifier.notify()
    assert woken(second) and woken(newcomer)
    second.close()
    newcomer.close()


def test_a_store_with_every_place_taken_still_opens_a_listener_that_only_polls(tmp_path):
    store = str(tmp_path / "w.db")
    full = [wakeup.Listener(store) for _ in range(wakeup.SLOTS)]
    extra = wakeup.Listener(store)
    assert extra.sock is None and extra.place is None and extra.move_down() is None
    for listener in full:
        listener.close()


def test_the_wake_up_addresses_are_those_every_release_computes(tmp_path):
    """A producer of an older release (or another Python) wakes this pool: a store's
    addresses are named by the SHA-1 of its real path, however this one computes it."""
    import hashlib
    import os
    db = tmp_path / "store.db"
    digest = hashlib.sha1(os.path.realpath(db).encode()).hexdigest()[:20]
    assert wakeup._addresses(str(db)) == [
        f"\0jobpool-{digest}-{i}".encode() for i in range(wakeup.SLOTS)]


WAKERS = [pytest.param(_core_py.wake, id="pure")]
if core.NAME == "compiled":
    from jobpool import _core
    WAKERS.append(pytest.param(_core.wake, id="compiled"))


@pytest.mark.parametrize("wake", WAKERS)
def test_a_full_listener_is_passed_over_and_the_wake_up_stops_at_the_first_gap(tmp_path, wake):
    """R11 in both wakers (the compiled one's ``sendto`` made in C): a supervisor whose
    buffer is full is awake anyway, so the next place is still woken; nothing past the
    first place nobody listens on is sent to; a refused place raises nothing."""
    store = str(tmp_path / "w.db")
    full, awake, _gap, hidden = (wakeup.Listener(store) for _ in range(4))
    _gap.close()
    assert (full.place, awake.place, hidden.place) == (0, 1, 3)
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender.setblocking(False)
    addresses = tuple(wakeup._addresses(store))
    try:
        while True:  # fill the first listener's buffer
            sender.sendto(b"!", addresses[0])
    except BlockingIOError:
        pass
    wake(sender, addresses)
    assert woken(awake)
    assert not woken(hidden)
    full.drain()
    wake(sender, addresses)
    assert woken(full) and woken(awake)
    for listener in (full, awake, hidden):
        listener.close()
    wake(sender, addresses)  # nobody listens now: nothing raised
    sender.close()
