"""Run only by tests/test_watchdog.py (its name keeps it out of the suite): a thread that grows without end."""

import threading
import time


def test_a_thread_left_running_grows_without_end():
    held = []

    def grow():
        while True:
            held.append(bytearray(8 << 20))  # touched, so resident
            time.sleep(0.01)

    threading.Thread(target=grow, name="runaway", daemon=True).start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(0.1)
    raise AssertionError("the memory guard did not stop the run within 600 s")
