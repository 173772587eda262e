"""hrr_kernel.lookup: a batch's distinct ids and the gather of their rows agree with torch.unique and
index_select (values and gradients), natively and on the torch fallback."""

import pytest
import torch

from hrr_kernel import native
from hrr_kernel.lookup import IdMarks, gather_rows, unique_ids

needs_native = pytest.mark.skipif(not native.available(), reason=native.status())


@needs_native
def test_unique_ids_first_appearance_and_marks_reset():
    ids = torch.tensor([5, 2, 5, 9, 2, 0, 9, 9])
    marks = IdMarks(10)
    uniq, inv = unique_ids(ids, marks)
    assert uniq.tolist() == [5, 2, 9, 0]  # order of first appearance
    assert inv.tolist() == [0, 1, 0, 2, 1, 3, 2, 2]
    assert torch.equal(uniq[inv], ids)
    assert (marks.mark() == -1).all()  # left as found: the next batch starts clean
    uniq2, inv2 = unique_ids(torch.tensor([9, 1]), marks)
    assert uniq2.tolist() == [9, 1] and inv2.tolist() == [0, 1]
    empty_u, empty_i = unique_ids(torch.zeros(0, dtype=torch.int64), marks)
    assert empty_u.numel() == 0 and empty_i.numel() == 0


def test_unique_ids_same_set_as_torch_unique():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 300, (4096,), generator=g)
    uniq, inv = unique_ids(ids, IdMarks(300))
    assert torch.equal(uniq[inv], ids)
    assert torch.equal(torch.sort(uniq).values, torch.unique(ids))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_gather_rows_value_and_gradient_match_index_select(dtype, threads):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(1)
        rows = torch.randn(50, 13, dtype=dtype, generator=g)
        # row 7 and 49 never read (zero gradient), row 3 read many times
        index = torch.randint(0, 49, (400,), generator=g)
        index[index == 7] = 3
        weight = torch.randn(400, 13, dtype=dtype, generator=g)
        a = rows.clone().requires_grad_()
        out = gather_rows(a, index)
        (out * weight).sum().backward()
        b = rows.clone().requires_grad_()
        ref = b.index_select(0, index)
        (ref * weight).sum().backward()
        assert torch.equal(out, ref)
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(a.grad, b.grad, rtol=tol, atol=tol)
        assert (a.grad[7] == 0).all() and (a.grad[49] == 0).all()
        # exact against a float64 sum, in position order
        exact = torch.zeros(50, 13, dtype=torch.float64).index_add_(0, index, weight.double())
        torch.testing.assert_close(a.grad.double(), exact, rtol=tol, atol=tol)
    finally:
        torch.set_num_threads(old)


@needs_native
def test_gather_rows_backward_is_reproducible():
    g = torch.Generator().manual_seed(2)
    rows = torch.randn(30, 64, generator=g).requires_grad_()
    index = torch.randint(0, 30, (2000,), generator=g)
    weight = torch.randn(2000, 64, generator=g)
    grads = []
    for _ in range(3):
        rows.grad = None
        (gather_rows(rows, index) * weight).sum().backward()
        grads.append(rows.grad.clone())
    assert all(torch.equal(grads[0], x) for x in grads[1:])


def test_gather_rows_falls_back_without_native(monkeypatch):
    monkeypatch.setattr(native, "usable", lambda *t: False)
    monkeypatch.setattr(native, "available", lambda: False)
    rows = torch.randn(5, 3, requires_grad=True)
    index = torch.tensor([4, 0, 4])
    out = gather_rows(rows, index)
    out.sum().backward()
    assert rows.grad[4].tolist() == [2.0, 2.0, 2.0] and rows.grad[1].tolist() == [0.0, 0.0, 0.0]
    uniq, inv = unique_ids(torch.tensor([3, 1, 3]), IdMarks(4))
    assert uniq.tolist() == [1, 3] and inv.tolist() == [1, 0, 1]  # torch.unique: sorted


def test_id_marks_copy_and_pickle():
    import copy
    import pickle

    marks = IdMarks(7)
    marks.mark()
    for twin in (copy.deepcopy(marks), pickle.loads(pickle.dumps(marks))):
        assert twin.n_ids == 7 and twin.lock is not marks.lock
        uniq, inv = unique_ids(torch.tensor([6, 6, 1]), twin)
        assert torch.equal(uniq[inv], torch.tensor([6, 6, 1]))
