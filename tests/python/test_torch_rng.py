"""dgrr.torch's counter-based randomness (Dropout, PermutationSampler), the
state mirrored into checkpoints, and determinism(), in process."""

import warnings

import pytest
import torch

import dgrr
import dgrr.torch as dt


def dropout_out(p, step, first, x, layer=3, site=1):
    drop = dt.Dropout(p, layer=layer, site=site, context=dt.RandomContext())
    drop.context.set(seed=11, step=step, examples=(first, x.shape[0]))
    return drop(x)


def test_dropout_rows_do_not_depend_on_the_batch_they_sit_in():
    x = torch.randn(8, 5, 7, generator=torch.Generator().manual_seed(1))
    whole = dropout_out(0.3, 4, 0, x)
    halves = torch.cat([dropout_out(0.3, 4, 0, x[:4]), dropout_out(0.3, 4, 4, x[4:])])
    assert torch.equal(whole, halves)
    # Example 5 alone, in a batch of one, gets its row of the batch of 8.
    assert torch.equal(dropout_out(0.3, 4, 5, x[5:6]), whole[5:6])


def test_dropout_masks_do_not_depend_on_the_thread_count():
    x = torch.randn(16, 300, generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outs.append(dropout_out(0.5, 0, 0, x))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])


def test_dropout_is_inverted_dropout_keyed_by_step_layer_and_site():
    x = torch.ones(64, 256)
    y = dropout_out(0.25, 2, 0, x)
    kept = y != 0
    assert torch.all(y[kept] == torch.tensor(1 / 0.75))
    assert 0.70 < kept.float().mean().item() < 0.80       # 16384 draws at p_keep 0.75
    for other in (dropout_out(0.25, 3, 0, x), dropout_out(0.25, 2, 0, x, layer=4),
                  dropout_out(0.25, 2, 0, x, site=2)):
        assert not torch.equal(y, other)
    # The backward multiplies by the same mask and scale.
    w = torch.ones(64, 256, requires_grad=True)
    dropout_out(0.25, 2, 0, w).sum().backward()
    assert torch.equal(w.grad, y)
    # Off in eval mode; refused without a context or with a wrong batch.
    drop = dt.Dropout(0.25, context=dt.RandomContext())
    assert torch.equal(drop.eval()(x), x)
    with pytest.raises(dgrr.FailedPreconditionError, match="RandomContext"):
        drop.train()(x)
    drop.context.set(seed=1, step=0, examples=(0, 3))
    with pytest.raises(dgrr.InvalidArgumentError, match="dimension 0 must be the batch"):
        drop(x)
    with pytest.raises(dgrr.InvalidArgumentError, match="not in"):
        dt.Dropout(1.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.1, 0.25, 1 / 3, 0.5, 0.9])
def test_dropout_scaled_mask_path_equals_the_general_one_bit_for_bit(dtype, p):
    # Dropout's one-call scaled mask (float32/float64 on the CPU) against what
    # it replaced: the uint8 keep-mask, converted, times 1/(1-p); forward
    # outputs and input gradients, signed zeros and all.
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(6, 9, 11, generator=g, dtype=torch.float64) * 1e3).to(dtype)
    x[0, 0, :4] = torch.tensor([-0.0, 0.0, float("inf"), -1e-30])
    drop = dt.Dropout(p, layer=2, site=1, context=dt.RandomContext())
    drop.context.set(seed=7, step=5, examples=(40, x.shape[0]))
    a = x.clone().requires_grad_(True)
    y = drop(a)
    y.backward(torch.full_like(y, 1.5))
    b = x.clone().requires_grad_(True)
    keep = drop.keep_mask(b.shape).to(dtype=dtype)
    z = b * (keep * (1.0 / (1.0 - p)))
    z.backward(torch.full_like(z, 1.5))
    assert y.dtype == dtype
    assert y.detach().numpy().tobytes() == z.detach().numpy().tobytes()
    assert a.grad.numpy().tobytes() == b.grad.numpy().tobytes()


def test_replace_dropout_swaps_every_torch_dropout():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.1),
                                torch.nn.Sequential(torch.nn.Dropout(0.2)))
    assert dt.replace_dropout(model) == ["1", "2.0"]
    assert isinstance(model[1], dt.Dropout) and (model[1].p, model[1].layer) == (0.1, 0)
    assert isinstance(model[2][0], dt.Dropout) and (model[2][0].p, model[2][0].layer) == (0.2, 1)


def test_the_sampler_resumes_in_o1_and_continues_the_uninterrupted_order(monkeypatch):
    n = 37
    uninterrupted = dt.PermutationSampler(n, seed=5)
    epochs = [list(uninterrupted) for _ in range(3)]
    for e in epochs:
        assert sorted(e) == list(range(n))
    assert epochs[0] != epochs[1] != epochs[2]

    # Interrupted in epoch 1 after 10 indices: a new sampler given the
    # saved (epoch, position) continues exactly there...
    s = dt.PermutationSampler(n, seed=5)
    it = iter(s)
    for _ in range(n + 10):
        if s.epoch == 0 and s.position == n:
            it = iter(s)
        next(it)
    assert (s.epoch, s.position) == (1, 10)
    calls = []
    real = dt._dgrr.epoch_permutation
    monkeypatch.setattr(dt._dgrr, "epoch_permutation",
                        lambda *a: calls.append(a) or real(*a))
    resumed = dt.PermutationSampler(n, seed=5)
    resumed.state.copy_(s.state)
    assert list(resumed) == epochs[1][10:]
    assert list(resumed) == epochs[2]
    # ...computing one permutation per epoch it visits, none for the epochs
    # before: resuming at epoch 10^6 costs what resuming at epoch 1 does.
    assert [c[1] for c in calls] == [1, 2]
    far = dt.PermutationSampler(n, seed=5)
    far.seek(10**6 * n + 3)
    assert (far.epoch, far.position) == (10**6, 3) and len(list(far)) == n - 3
    assert calls[-1][1] == 10**6 and len(calls) == 3


def test_mirrored_state_comes_back_and_may_not_change_shape(tmp_path):
    box = {"a": 1.5, "n": [1, 2], "t": torch.arange(3.0), "name": "kept as is"}
    put = []
    with dgrr.open(run_dir=tmp_path / "r", seed=1, resume=False) as s:
        dt.register_object_state(s, "user", get=lambda: box, put=put.append)
        assert s.resume() == 0
        s.begin_step(0)
        s.end_step(0, 0.0)
        box.update(a=2.5, n=[3, 4], t=torch.tensor([7.0, 8.0, 9.0]))
        s.checkpoint(0)
        box["n"].append(5)
        with pytest.raises(dgrr.FailedPreconditionError, match="user.n.2"):
            s.checkpoint(0)
    box.update(a=0.0, n=[0, 0], t=torch.zeros(3))
    put.clear()
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        dt.register_object_state(s, "user", get=lambda: box, put=put.append)
        assert s.resume() == 1
    restored = put[-1]
    assert restored["a"] == 2.5 and restored["n"] == [3, 4] and restored["name"] == "kept as is"
    assert torch.equal(restored["t"], torch.tensor([7.0, 8.0, 9.0]))


def test_determinism_respects_and_names_a_nondeterministic_user_setting():
    saved = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True        # set by the script before dgrr
        with pytest.warns(dt.NondeterminismWarning,
                          match=r"torch.backends.cudnn.benchmark=true \(origin: user\)"):
            info = dt.determinism()
        c = info["torch.controls"]
        assert c["torch.backends.cudnn.benchmark"]["origin"] == "user"
        assert "warning" in c["torch.backends.cudnn.benchmark"]
        assert c["torch.use_deterministic_algorithms"]["origin"] == "dgrr default"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            info = dt.determinism(backends_cudnn_benchmark=False)
        assert info["torch.controls"]["torch.backends.cudnn.benchmark"] == {
            "value": "false", "origin": "user"}
        assert info["torch.version"] == torch.__version__
        with pytest.raises(dgrr.InvalidArgumentError, match="unknown setting"):
            dt.determinism(benchmark=True)
    finally:
        torch.backends.cudnn.benchmark = saved
