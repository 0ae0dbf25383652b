"""The page-manager model through the bindings: allocate, share, copy-on-write, free."""

import pytest

import kvcheck


def test_allocate_share_copy_on_write_free():
    pm = kvcheck.PageManagerModel(pool_pages=16, layers=1, kv_heads=2, high_tokens_per_page=4,
                                  low_tokens_per_page=4, max_seq_len=32)
    pm.admit(0)
    assert pm.prompt(0, 6) == "ok"  # ceil(6 / 4) = 2 pages a head, taken from the front
    assert pm.pages(0, head=0) == [0, 1] and pm.pages(0, head=1) == [2, 3]
    assert pm.free_pages == list(range(4, 16))
    pm.admit(1)
    assert pm.share(0, 1, 6) == "ok"
    assert pm.pages(1, head=0) == [0, 1] and pm.refcount(1) == 2 and pm.sharing_violation() == ""
    # Request 1's next token lands in the shared, partly filled page 1: copied first.
    assert pm.append(1) == "ok" and pm.copies == 2
    assert pm.pages(1, head=0) == [0, 4] and pm.pages(1, head=1) == [2, 5] and pm.refcount(1) == 1
    pm.release(0)  # pages 1 and 3 drop to 0 and are freed; 0 and 2 are still request 1's
    assert pm.refcount(0) == 1 and pm.refcount(1) == 0 and pm.free_pages[-2:] == [1, 3]
    pm.release(1)
    assert sorted(pm.free_pages) == list(range(16))


def test_exhaustion_and_misuse():
    pm = kvcheck.PageManagerModel(3, 1, 1, 4, 4, 64)
    pm.admit(7)
    assert pm.prompt(7, 16) == "pool_exhausted" and pm.free_pages == [0, 1, 2]
    with pytest.raises(ValueError, match="request 8 is not admitted"):
        pm.prompt(8, 4)
    with pytest.raises(ValueError, match="already admitted"):
        pm.admit(7)
