"""One user's request loop on the daemon's user socket is refused beyond a rate; others are not."""

from gpuperf.daemon.ratelimit import Buckets


def test_a_burst_then_the_rate_per_uid():
    b = Buckets(rate_per_s=10, burst=5)
    assert [b.allow(1000, 0.0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert b.allow(1001, 0.0)                 # another user has a bucket of their own
    assert not b.allow(1000, 0.05)            # half a token after 50 ms
    assert b.allow(1000, 0.2)                 # two tokens after 200 ms
    assert b.refused == {1000: 3}


def test_a_uid_that_waited_gets_a_full_burst_not_more():
    b = Buckets(rate_per_s=10, burst=5)
    for _ in range(5):
        b.allow(7, 0.0)
    assert sum(b.allow(7, 100.0) for _ in range(10)) == 5
