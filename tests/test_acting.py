"""The fused rollout's greedy action (agents/rollouts/acting.py) and the padded product chain.

The greedy action of a dueling network is the argmax of its advantage head; on CUDA in bf16,
one kernel casts the weights and the observations into padded bfloat16 copies. These tests hold
the actions to the Q-network's own argmax, the casts to torch's bit for bit, and the padded
chain to the plain one.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.torch_layers import FlattenExtractor
from torch import nn

from agents.algorithm.policies import DuelingQNetwork, aligned_width, run_chain
from agents.rollouts.acting import GreedyActor

SPACE = gym.spaces.Box(-1.0, 1.0, (54,), np.float32)
CUDA = th.cuda.is_available()


def _net(arch=None, activation=nn.LeakyReLU, n_actions: int = 45) -> DuelingQNetwork:
    return DuelingQNetwork(
        SPACE,
        gym.spaces.Discrete(n_actions),
        FlattenExtractor(SPACE),
        54,
        arch,
        activation_fn=activation,
    )


def _assert_greedy(q: th.Tensor, actions: th.Tensor, tol: float) -> None:
    """Every action's Q-value is the row's maximum, up to ``tol`` (ties created by rounding)."""
    chosen = q.gather(1, actions.reshape(-1, 1)).squeeze(1)
    gap = q.max(dim=1).values - chosen
    assert actions.dtype == th.int64 and actions.shape == (q.shape[0],)
    assert float(gap.max()) <= tol, float(gap.max())


@pytest.mark.parametrize(
    "arch, activation",
    [
        (None, nn.LeakyReLU),
        ({"shared": [13], "value": [5, 3], "advantage": [7, 3]}, nn.Sigmoid),  # odd widths
        ({"shared": [], "value": [8], "advantage": [8]}, nn.Tanh),  # no trunk
    ],
)
def test_run_chain_aligned_matches_the_plain_chain(arch, activation) -> None:
    """Zero padding to multiples of 8 gives the same output and weight gradients, also where
    the activation is not 0 at 0 (sigmoid: the padded units are 0.5 and meet zero weights)."""
    th.manual_seed(0)
    net = _net(arch, activation)
    x = th.randn(37, 54)
    results = []
    for aligned in (False, True):
        net.zero_grad()
        out = run_chain(net.chain(), x, aligned=aligned)
        (out * th.linspace(-1, 1, out.shape[1])).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in net.parameters()]))
    (plain, g_plain), (padded, g_padded) = results
    assert padded.shape == plain.shape == (37, 46)
    th.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_padded, g_plain, strict=True):
        th.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert [aligned_width(n) for n in (1, 8, 9, 54, 256)] == [8, 8, 16, 56, 256]


def test_greedy_action_is_the_argmax_of_q_on_the_cpu() -> None:
    th.manual_seed(1)
    net = _net()
    obs = th.randn(500, 54)
    actor = GreedyActor(net, "fp32")
    assert actor.kind == "advantage"  # no CuPy kernel on the CPU
    with th.no_grad():
        q = net(obs)
    actions = actor(obs)
    _assert_greedy(q, actions, tol=1e-5)
    assert th.equal(actions, q.argmax(dim=1))  # no near-ties among 45 random values here


def test_greedy_actor_falls_back_to_the_q_forward() -> None:
    from stable_baselines3.dqn.policies import QNetwork

    net = QNetwork(SPACE, gym.spaces.Discrete(5), FlattenExtractor(SPACE), 54, [16])
    actor = GreedyActor(net, "tf32")
    assert actor.kind == "q-forward"
    obs = th.randn(20, 54)
    with th.no_grad():
        assert th.equal(actor(obs), net(obs).argmax(dim=1))
    custom = _net({"value": [8], "advantage": [8]}, nn.Dropout)  # not an elementwise activation
    assert GreedyActor(custom, "fp32").kind == "q-forward"


def test_greedy_actor_rejects_an_unknown_precision() -> None:
    with pytest.raises(ValueError, match=r"precision = 'fp16' is invalid: allowed is 'tf32'"):
        GreedyActor(_net(), "fp16")


def test_greedy_actor_notices_replaced_parameters() -> None:
    net = _net()
    actor = GreedyActor(net, "fp32")
    assert actor.serves(net)
    net.load_state_dict(_net().state_dict())  # copies in place: same storage
    assert actor.serves(net)
    net.shared[0].weight = nn.Parameter(net.shared[0].weight.detach().clone())
    assert not actor.serves(net)
    assert not actor.serves(_net())


def _special_values(shape: tuple[int, ...], device: str) -> th.Tensor:
    """Random values with the cases a float -> bf16 cast must round alike: ties, NaN, +-inf,
    -0, subnormals, values rounding up into the next binade and to infinity."""
    g = th.Generator().manual_seed(2)
    x = th.randn(shape, generator=g)
    flat = x.view(-1)
    bits = th.tensor(
        [0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
         0x80000000, 0x00000001, 0x807FFFFF, 0x3FFFFFFF, 0x7FA00000],
        dtype=th.int64,
    ).to(th.int32)  # fmt: skip
    flat[: bits.numel()] = bits.view(th.float32)
    return x.to(device)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_bf16_kernel_casts_as_torch_does_and_pads_with_zeros() -> None:
    net = _net().cuda()
    with th.no_grad():
        net.shared[0].weight.copy_(_special_values((256, 54), "cuda"))
    actor = GreedyActor(net, "bf16")
    assert actor.kind == "advantage-bf16-kernel"
    obs = _special_values((333, 54), "cuda")
    actor(obs)
    th.cuda.synchronize()
    linear = [m for m in (*net.shared, *net.advantage_head) if isinstance(m, nn.Linear)]
    copies = [op for op in actor.layers if not isinstance(op, nn.Module)]
    assert len(copies) == len(linear) == 4
    for m, (w16, b16) in zip(linear, copies, strict=True):
        out, inp = m.weight.shape
        assert w16.shape == (aligned_width(out), aligned_width(inp))
        _assert_same_bf16(w16[:out, :inp], m.weight.detach())
        _assert_same_bf16(b16[:out], m.bias.detach())
        assert not w16[out:].any() and not w16[:, inp:].any() and not b16[out:].any()
    x16 = actor._inputs[333]
    assert x16.shape == (333, 56)
    _assert_same_bf16(x16[:, :54], obs)
    assert not x16[:, 54:].any()


def _assert_same_bf16(copy: th.Tensor, source: th.Tensor) -> None:
    """``copy`` holds torch's bf16 cast of ``source`` bit for bit, NaN for NaN (whose payload
    torch leaves to the GPU's conversion instruction)."""
    expect = source.to(th.bfloat16)
    nan = expect.isnan()
    assert th.equal(copy.isnan(), nan)
    assert th.equal(copy.view(th.int16)[~nan], expect.view(th.int16)[~nan])


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("precision", ["bf16", "tf32", "fp32"])
def test_greedy_actions_on_cuda_are_the_argmax_of_q(precision: str) -> None:
    th.manual_seed(3)
    net = _net().cuda()
    obs = th.randn(4096, 54, device="cuda")
    actor = GreedyActor(net, precision)
    prev = th.backends.cuda.matmul.allow_tf32
    th.backends.cuda.matmul.allow_tf32 = False
    try:
        with th.no_grad():
            q = net(obs)
        actions = actor(obs)
        assert th.backends.cuda.matmul.allow_tf32 is False  # restored after the forward
    finally:
        th.backends.cuda.matmul.allow_tf32 = prev
    # Q spans about 0.1 here; bf16 products keep 8 bits of mantissa.
    tol = {"bf16": 3e-3, "tf32": 5e-4, "fp32": 1e-5}[precision]
    _assert_greedy(q, actions, tol)
    assert float((actions == q.argmax(dim=1)).float().mean()) > 0.9


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_a_captured_bf16_act_reads_the_weights_of_each_replay() -> None:
    """The cast runs inside the graph: weights changed in place after the capture (as a train
    step changes them) change the replayed actions as they change eager ones."""
    th.manual_seed(4)
    net = _net().cuda()
    actor = GreedyActor(net, "bf16")
    obs = th.randn(1024, 54, device="cuda")
    side = th.cuda.Stream()
    side.wait_stream(th.cuda.current_stream())
    with th.cuda.stream(side):
        actor(obs)
    th.cuda.current_stream().wait_stream(side)
    graph = th.cuda.CUDAGraph()
    with th.cuda.graph(graph):
        out = actor(obs)
    for seed in range(3):
        with th.no_grad():
            for p in net.parameters():
                p.copy_(th.randn(p.shape, generator=th.Generator().manual_seed(seed)).cuda() * 0.1)
        graph.replay()
        th.cuda.synchronize()
        assert th.equal(out, actor(obs))


@pytest.mark.parametrize("activation", [nn.LeakyReLU, nn.ReLU, nn.Tanh])
def test_numpy_greedy_is_the_argmax_of_q(activation) -> None:
    from agents.rollouts.acting import NumpyGreedy

    th.manual_seed(5)
    net = _net(activation=activation)
    greedy = NumpyGreedy.of([net])
    assert greedy is not None
    obs = th.randn(300, 54)
    with th.no_grad():
        q = net(obs)
    actions = th.from_numpy(np.concatenate([greedy(o[None]) for o in obs.numpy()]))
    _assert_greedy(q, actions, tol=1e-5)
    assert NumpyGreedy.of([_net(activation=nn.SiLU)]) is None  # no NumPy form: torch runs it
    assert NumpyGreedy.of([net, _net({"shared": [32]})]) is None  # two architectures


def test_numpy_greedy_rows_do_not_depend_on_their_neighbours() -> None:
    """Snapshots backtested side by side act as each would alone, to the bit."""
    from agents.rollouts.acting import NumpyGreedy

    th.manual_seed(6)
    nets = [_net() for _ in range(5)]
    batch = NumpyGreedy.of(nets)
    assert batch is not None and batch.k == 5
    rng = np.random.default_rng(0)
    for _ in range(200):
        obs = rng.standard_normal((5, 54)).astype(np.float32)
        alone = [NumpyGreedy.of([n])(o[None])[0] for n, o in zip(nets, obs, strict=True)]
        assert batch(obs).tolist() == alone
    # The copies were taken at construction: later weight changes do not reach them.
    with th.no_grad():
        nets[0].advantage_head[-1].bias.add_(100.0 * th.arange(45.0))
    assert batch(obs).tolist() == alone


def test_backtest_policies_match_torch() -> None:
    from agents.pipelines.backtest_policies import greedy_batch_policy, greedy_policy

    class Model:
        q_net = _net()

    obs = th.randn(200, 54)
    with th.no_grad():
        expect = Model.q_net(obs).argmax(dim=1).numpy()
    policy = greedy_policy(Model())
    got = np.concatenate([policy(o, k) for k, o in enumerate(obs.numpy())])
    assert got.dtype == np.int64 and np.array_equal(got, expect)
    silu = _net(activation=nn.SiLU)  # torch's path
    both = greedy_batch_policy([Model.q_net, silu])
    with th.no_grad():
        expect_silu = silu(obs).argmax(dim=1).numpy()
    pairs = [both(np.stack([o, o]), k) for k, o in enumerate(obs.numpy())]
    assert np.array_equal(np.array(pairs), np.stack([expect, expect_silu], axis=1))
