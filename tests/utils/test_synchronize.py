import multiprocessing as mp
import queue
import socket
import time

import pytest

from rlfast.utils.synchronize import RWLock, drain_queue, find_port

FORK = mp.get_context("fork")
N_SLOTS = 64


def _join_all(procs):
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.terminate()
            p.join()


def _writer(lock, shared, start, stop):
    start.wait(timeout=20)
    k = 0
    while not stop.is_set():
        k += 1
        with lock.write_lock:
            for i in range(N_SLOTS):  # slow, element-wise write: torn unless excluded
                shared[i] = k


def _reader(lock, shared, n_reads, start, torn, seen_writes):
    start.wait(timeout=20)
    for _ in range(n_reads):
        with lock.read_lock:
            snapshot = shared[:]
        if len(set(snapshot)) != 1:
            with torn.get_lock():
                torn.value += 1
        if snapshot[-1] > 0:
            with seen_writes.get_lock():
                seen_writes.value += 1


def test_rwlock_writer_excludes_readers_across_processes():
    lock = RWLock(FORK)
    shared = FORK.RawArray("i", N_SLOTS)
    torn, seen_writes = FORK.Value("i", 0), FORK.Value("i", 0)
    start, stop = FORK.Barrier(3), FORK.Event()
    writer = FORK.Process(target=_writer, args=(lock, shared, start, stop))
    readers = [FORK.Process(target=_reader, args=(lock, shared, 3000, start, torn, seen_writes))
               for _ in range(2)]
    procs = [writer, *readers]
    for p in procs:
        p.start()
    try:
        for p in readers:
            p.join(timeout=30)
    finally:
        stop.set()
        _join_all(procs)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert seen_writes.value > 0  # readers really ran while the writer was writing
    assert torn.value == 0
    assert len(set(shared[:])) == 1


def _hold_read(lock, inside, release):
    with lock.read_lock:
        inside.set()
        release.wait(30)


def _shared_read(lock, barrier, ok):
    with lock.read_lock:
        barrier.wait(timeout=20)  # only passes if both readers are inside together
        ok.value += 1


def _write_once(lock, wrote):
    with lock.write_lock:
        wrote.set()


def test_rwlock_readers_share_and_writer_waits_for_them():
    lock = RWLock(FORK)
    barrier, ok = FORK.Barrier(2), FORK.RawValue("i", 0)
    readers = [FORK.Process(target=_shared_read, args=(lock, barrier, ok)) for _ in range(2)]
    for p in readers:
        p.start()
    _join_all(readers)
    assert [p.exitcode for p in readers] == [0, 0] and ok.value == 2

    inside, release, wrote = FORK.Event(), FORK.Event(), FORK.Event()
    holder = FORK.Process(target=_hold_read, args=(lock, inside, release))
    writer = FORK.Process(target=_write_once, args=(lock, wrote))
    holder.start()
    try:
        assert inside.wait(20)
        writer.start()
        assert not wrote.wait(0.3)  # writer must not get in while a reader holds the lock
        release.set()
        assert wrote.wait(20)
    finally:
        release.set()
        _join_all([holder, writer])
    assert holder.exitcode == 0 and writer.exitcode == 0


def test_rwlock_in_process_release_checks():
    lock = RWLock()
    with lock.read_lock:
        with lock.read_lock:  # reads nest
            pass
    with lock.write_lock:
        pass
    with pytest.raises(RuntimeError, match="released more times"):
        lock.read_lock.release()


def _put_items(q, items):
    for item in items:
        q.put(item)


def _put_then_exit(q, items):
    p = FORK.Process(target=_put_items, args=(q, items))
    p.start()
    p.join(timeout=30)  # a child flushes its queue buffer before exiting
    assert p.exitcode == 0


def test_drain_queue_nonblocking_mode():
    q = FORK.Queue()
    _put_then_exit(q, [1, "two", (3,)])
    assert drain_queue(q) == [1, "two", (3,)]
    assert drain_queue(q) == []


def test_drain_queue_guard_sentinel_puts_none_back():
    q = FORK.Queue()
    _put_then_exit(q, [1, 2, None, 3])
    assert drain_queue(q, guard_sentinel=True) == [1, 2]
    # The guarded None went back to the end of the queue, behind 3.
    assert drain_queue(q, n_sentinel=1, timeout=10) == [3]


def test_drain_queue_sentinel_mode_waits_for_all_producers():
    q = FORK.Queue()
    producers = [FORK.Process(target=_put_items, args=(q, [10 * k + i for i in range(5)] + [None]))
                 for k in range(2)]
    for p in producers:
        p.start()
    try:
        got = drain_queue(q, n_sentinel=2, timeout=20)
    finally:
        _join_all(producers)
    assert sorted(got) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    q.put(7)  # same-process put: the blocking gets absorb the feeder-thread delay
    q.put(None)
    assert drain_queue(q, n_sentinel=1, timeout=10) == [7]


def test_drain_queue_argument_checks_and_timeout():
    q = FORK.Queue()
    with pytest.raises(ValueError, match="guard_sentinel"):
        drain_queue(q, n_sentinel=1, guard_sentinel=True)
    with pytest.raises(ValueError, match="n_sentinel"):
        drain_queue(q, n_sentinel=-1)
    with pytest.raises(queue.Empty):
        drain_queue(q, n_sentinel=1, timeout=0.05)


def test_find_port_returns_bindable_port_and_skips_busy_ones():
    offset = 37 + int(time.time()) % 500
    port = find_port(offset)
    assert port >= 29500 + offset
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        next_port = find_port(port - 29500)
        assert next_port > port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", next_port))


def test_find_port_rejects_bad_offset():
    with pytest.raises(ValueError, match="offset"):
        find_port(-1)
    with pytest.raises(TypeError, match="offset"):
        find_port("3")
