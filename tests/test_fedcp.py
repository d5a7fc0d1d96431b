"""FedCP's defining behaviour on tiny problems (Zhang et al., KDD 2023, section 3)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pflcore.algorithms.fedcp import ConditionalPolicyNetwork, FedCP, logistic_noise
from pflcore.algorithms.losses import MMD_BANDWIDTHS, rbf_mmd
from pflcore.engine import Simulation, build_data

from conftest import FEDCP_MNIST, advance, needs_fedcp_mnist


def forced_policy(cpn: ConditionalPolicyNetwork, personal: float) -> None:
    """Make the CPN output the constant policy s = ``personal`` (exactly 0 or 1 in float32):
    the last linear layer outputs zeros, so LayerNorm returns its bias."""
    last = [m for m in cpn.net if isinstance(m, torch.nn.Linear)][-1]
    norm = [m for m in cpn.net if isinstance(m, torch.nn.LayerNorm)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
        d = cpn.dim
        norm.bias[:d] = 200.0 if personal else 0.0  # index 0: s (personal)
        norm.bias[d:] = 0.0 if personal else 200.0  # index 1: r (global)


def fedcp_network(make_config, **params):
    sim = Simulation(make_config(method="fedcp", method_params=params), build_data(make_config()))
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    client = sim.client(0, 0, 12)
    return sim, payload, client


@pytest.mark.parametrize("personal", [1.0, 0.0])
def test_a_forced_policy_selects_one_head(make_config, personal):
    """s = 1: the personal head alone reads h (the global head sees zeros, leaving its bias);
    s = 0: the global head alone."""
    sim, payload, client = fedcp_network(make_config)
    net = sim.algorithm.predictor(payload, client).eval()
    forced_policy(net.cpn, personal)
    with torch.no_grad():
        torch.nn.init.normal_(net.global_head.weight)  # heads that differ
        x = client.x[:16]
        h = net.body(x)
        logits, _, s = net.outputs(x)
    assert torch.equal(s, torch.full_like(s, personal))
    forced, _, _ = net.outputs(x, h, personal_share=personal)  # the same, without touching the CPN
    torch.testing.assert_close(forced, logits)
    if personal:
        expected = net.head(h) + net.global_head.bias
    else:
        expected = net.head.bias + net.global_head(h)
    torch.testing.assert_close(logits, expected)


def test_mmd_is_zero_for_identical_batches_and_matches_a_hand_computation():
    x = torch.randn(6, 5)
    assert abs(float(rbf_mmd(x, x.clone()))) < 1e-6
    # one point each, at distance 1: K_xx = K_yy = 4 (four bandwidths), K_xy = sum_a exp(-1 / (2a))
    value = float(rbf_mmd(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 0.0]])))
    assert value == pytest.approx(8 - 2 * sum(math.exp(-1 / (2 * a)) for a in MMD_BANDWIDTHS), rel=1e-6)
    # two points each: the biased estimator keeps the diagonals
    a, b = torch.tensor([[0.0], [2.0]]), torch.tensor([[1.0], [1.0]])
    k = lambda d2: sum(math.exp(-d2 / (2 * s)) for s in MMD_BANDWIDTHS)  # noqa: E731
    kxx = (k(0) * 2 + k(4) * 2) / 4
    kyy = k(0)
    kxy = k(1)
    assert float(rbf_mmd(a, b)) == pytest.approx(kxx + kyy - 2 * kxy, abs=1e-6)  # float32 cancellation


def test_conditional_input_changes_only_after_a_round_the_client_took_part_in(make_config):
    config = make_config(method="fedcp", participation=0.5, rounds=4)
    sim = Simulation(config, build_data(make_config()))
    initial = sim.state["contexts"].clone()
    seen: dict[int, torch.Tensor] = {}
    for r in range(4):
        before = {c: sim.client_states.get(c, {}).get("context") for c in range(4)}
        ids = set(int(c) for c in sim.participants(r))
        sim.run_round(r)
        for c in range(4):
            after = sim.client_states.get(c, {}).get("context")
            if c in ids:  # v_i = column sums of the personal head's weight after training
                head = sim.client_states[c]["head"]["weight"]
                assert torch.equal(after, head.sum(0, keepdim=True))
                seen[c] = after
            else:
                assert (after is None and before[c] is None) or torch.equal(after, before[c])
    never = [c for c in range(4) if c not in seen]
    for c in never:  # a client that never took part still predicts with its initial uniform v_i
        assert torch.equal(sim.algorithm.payload(sim.state, c)["context"], initial[c])
    assert ((initial >= 0) & (initial < 1)).all()


def test_upload_is_body_mixed_head_and_cpn_and_the_personal_head_stays(make_config):
    sim = Simulation(make_config(method="fedcp"), build_data(make_config()))
    payload = sim.algorithm.payload(sim.state, 1, "train")
    client = sim.client(1, 0, 11)
    update = sim.algorithm.local_update(payload, client)
    assert set(update) == {"body", "head", "cpn", "num_samples", "loss", "pir"}
    personal = client.state["head"]
    for key in ("weight", "bias"):
        torch.testing.assert_close(update["head"][key], 0.5 * personal[key] + 0.5 * payload["head"][key])
    assert not torch.equal(personal["weight"], payload["head"]["weight"])
    assert 0.0 < update["pir"] < 1.0


def test_server_averages_each_module_by_train_size(make_config):
    sim = Simulation(make_config(method="fedcp"), build_data(make_config()))
    updates = {}
    for cid, n in ((0, 1), (2, 3)):
        t = {k: torch.full_like(v, float(cid)) for k, v in sim.state["cpn"].items()}
        updates[cid] = {"body": {k: torch.full_like(v, float(cid)) for k, v in sim.state["body"].items()},
                        "head": {k: torch.full_like(v, float(cid)) for k, v in sim.state["head"].items()},
                        "cpn": t, "num_samples": n, "loss": 0.0, "pir": 0.5}
    new = sim.algorithm.aggregate(sim.state, updates, sim.server_context(0))
    for part in ("body", "head", "cpn"):
        for v in new[part].values():
            assert torch.allclose(v, torch.full_like(v, 1.5))  # (0 * 1 + 2 * 3) / 4
    assert float(new["pir"][0]) == 0.5 and math.isnan(float(new["pir"][1]))


def test_without_cpn_global_head_and_alignment_fedcp_is_fedper(make_config):
    """Table 1's last row, w.o. CPN&GFM&GH, is FedPer: the same models bit for bit."""
    params = {"use_cpn": False, "global_head": False, "lam": 0.0}
    fedcp = advance(Simulation(make_config(method="fedcp", method_params=params), build_data(make_config())), 3)
    fedper = advance(Simulation(make_config(method="fedper"), build_data(make_config())), 3)
    for key, tensor in fedper.state["body"].items():
        assert torch.equal(fedcp.state["body"][key], tensor), key
    for cid in range(4):
        for key, tensor in fedper.client_states[cid]["head"].items():
            assert torch.equal(fedcp.client_states[cid]["head"][key], tensor)
    np.testing.assert_array_equal(fedcp.evaluate(3), fedper.evaluate(3))


def test_stale_modules_match_the_fix_under_full_participation_and_differ_under_partial(make_config):
    def final(participation: float, stale: bool) -> dict:
        config = make_config(method="fedcp", participation=participation, rounds=4,
                             method_params={"stale_modules": stale})
        return advance(Simulation(config, build_data(make_config())), 4)

    full, full_stale = final(1.0, False), final(1.0, True)
    for part in ("body", "head", "cpn"):
        assert all(torch.equal(full.state[part][k], v) for k, v in full_stale.state[part].items())
    part, part_stale = final(0.5, False), final(0.5, True)
    assert any(not torch.equal(part.state["cpn"][k], v) for k, v in part_stale.state["cpn"].items())
    # the stale variant keeps one version per round a client last took part in, nothing more
    assert set(part_stale.state["versions"]) == {str(int(r)) for r in part_stale.state["received"]}


def test_gumbel_noise_is_logistic_the_difference_of_two_gumbel_draws():
    # log(u / (1 - u)) of the very uniforms drawn, and the logistic law's moments: mean 0, variance pi^2 / 3
    noise = logistic_noise((200_000,), torch.Generator().manual_seed(3), torch.device("cpu"))
    u = torch.rand((200_000,), generator=torch.Generator().manual_seed(3)).clamp(min=2.0 ** -24)
    torch.testing.assert_close(noise, torch.log(u) - torch.log1p(-u))
    assert abs(float(noise.mean())) < 0.02
    assert float(noise.var()) == pytest.approx(math.pi ** 2 / 3, rel=0.02)


def test_gumbel_noise_only_in_training_by_default(make_config):
    sim, payload, client = fedcp_network(make_config)
    net = sim.algorithm.predictor(payload, client).eval()
    x = client.x[:8]
    assert torch.equal(net(x), net(x))  # plain softmax at evaluation
    sim2, payload2, client2 = fedcp_network(make_config, gumbel_eval=True)
    noisy = sim2.algorithm.predictor(payload2, client2).eval()
    assert not torch.equal(noisy(x), noisy(x))


@pytest.mark.parametrize("variant, count", [({}, 0.527), ({"cpn_layers": 2}, 0.790), ({"cpn_layers": 3}, 1.052),
                                            ({"cpn_layers": 4}, 1.315)])
def test_cpn_variants_have_the_papers_parameter_counts(variant, count):
    """Appendix C (d = 512): 1 FC (with LayerNorm) 0.527M, 2 FC 0.790M, 3 FC 1.052M, 4 FC 1.315M."""
    cpn = FedCP(**variant)._cpn(512)
    assert sum(p.numel() for p in cpn.parameters()) / 1e6 == pytest.approx(count, abs=0.001)


@pytest.mark.parametrize("params", [{"cpn_input": "h"}, {"cpn_input": "v"}, {"cpn_input": "random"},
                                    {"lam": 0.0}, {"use_cpn": False}, {"use_cpn": False, "global_head": False},
                                    {"cpn_norm": "batch"}, {"cpn_norm": "group", "cpn_activation": "sigmoid"}])
def test_every_ablation_and_variant_trains(make_config, params):
    sim = advance(Simulation(make_config(method="fedcp", method_params=params), build_data(make_config())), 2)
    acc = sim.evaluate(2)
    assert np.isfinite(acc).all()


def test_policies_give_the_personal_share_per_sample(make_config):
    sim = advance(Simulation(make_config(method="fedcp"), build_data(make_config())), 1)
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    s = sim.algorithm.policies(payload, sim.client(0, 1, 12), sim.data.test[0].x)
    assert s.shape == (len(sim.data.test[0]), sim.model.feature_dim)
    assert ((s > 0) & (s < 1)).all()


def test_batchnorm_cpn_skips_a_lone_sample_batch(make_config):
    """A client whose last batch holds one sample still trains with the BatchNorm CPN."""
    config = make_config(method="fedcp", batch_size=79, method_params={"cpn_norm": "batch"})  # 80 = 79 + 1
    sim = advance(Simulation(config, build_data(make_config())), 1)
    assert np.isfinite(sim.evaluate(1)).all()


@needs_fedcp_mnist
def test_paper_settings():
    """Section 4 and appendix D: batch 10, E = 1, 20 clients all taking part, lr 0.005 and lambda 5
    for the CNN (0.1 and 1 for ResNet-18); the baselines take PFLlib's choices, overridable."""
    from pflcore.papers.fedcp import fedcp_config

    config = fedcp_config("fedcp", data_root=str(FEDCP_MNIST))
    assert (config.batch_size, config.local_epochs, config.num_clients, config.participation) == (10, 1, 20, 1.0)
    assert (config.lr, config.momentum, config.weight_decay, config.method_params) == (0.005, 0.0, 0.0, {"lam": 5.0})
    assert config.partition == {"kind": "given"} and config.dataset == "pfllib"
    resnet = fedcp_config("fedcp", dataset="cifar10", model="resnet18", method_params={"tau": 2.0})
    assert resnet.lr == 0.1 and resnet.method_params == {"lam": 1.0, "tau": 2.0}
    assert resnet.partition == {"kind": "pfllib_dirichlet", "alpha": 0.1}
    assert fedcp_config("fedphp", data_root=str(FEDCP_MNIST)).method_params == {"mmd_kernel": "fixed"}
    assert fedcp_config("fedphp", data_root=str(FEDCP_MNIST), method_params={"mmd_kernel": "adaptive"}).method_params == {"mmd_kernel": "adaptive"}
    assert fedcp_config("fedrep", data_root=str(FEDCP_MNIST)).method_params == {"head_epochs": 1}
    assert fedcp_config("pfedme", data_root=str(FEDCP_MNIST)).method_params == {"personal_lr": 0.01,
                                                                                "inner_weight_decay": 0.001}
    assert fedcp_config("fedavg", data_root=str(FEDCP_MNIST)).method_params == {}
    # a row label, as Table 2's notebook takes it for a variant beside a row
    variant = fedcp_config("fedcp lam=1", data_root=str(FEDCP_MNIST), method_params={"tau": 2.0})
    assert (variant.method, variant.method_params) == ("fedcp", {"lam": 1, "tau": 2.0})
    assert fedcp_config("fedrep head_epochs=2", data_root=str(FEDCP_MNIST)).method_params == {"head_epochs": 2}
    with pytest.raises(ValueError):
        fedcp_config("fedcp", setting="iid")


@needs_fedcp_mnist
@pytest.mark.parametrize("setting", ["practical", "pathological"])
def test_every_table_2_row_trains_in_the_papers_setting_without_diverging(setting):
    """Each row of Table 2 as its notebook configures it (section 4's batch 10 and lr 0.005, the
    baselines' PFLlib choices) takes its first round on the authors' MNIST with a finite loss: a
    row whose settings diverge would otherwise be found only hours into a paper run (pFedMe at
    its own personal learning rate 0.1 did, within the first batches)."""
    from pflcore.papers.fedcp import FEDCP_TABLE2, fedcp_config

    rows = list(FEDCP_TABLE2[setting]["mnist"])  # FedCP and its eleven baselines
    assert len(rows) == 12 and "fedcp" in rows
    for method in rows:
        config = fedcp_config(method, setting=setting, data_root=str(FEDCP_MNIST), subsample=0.03, rounds=1)
        record = Simulation(config, build_data(config)).run_round(0)  # a non-finite loss raises DivergenceError
        assert math.isfinite(record["train_loss"]), method


def test_figure_5_s_pir_and_shares_come_back_from_the_record_without_training(tmp_path, monkeypatch, make_config):
    """Figure 5 from a record alone: the PIR per round (a reported array) and the personal
    shares of the final models (kept as derived arrays) equal what the trained run gives."""
    import shutil

    from pflcore import records
    from pflcore.engine import run
    from pflcore.papers.fedcp import final_personal_shares, pir_per_round

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(records.TRAIN_ENV, raising=False)
    config = make_config(method="fedcp", rounds=2, eval_every=1)
    with records.recording("fedcp/f5_policy"):
        trained = run(config)
        pir, shares = pir_per_round(trained), final_personal_shares(trained)
    assert pir.shape == (2, config.num_clients) and sorted(shares) == list(range(config.num_clients))
    assert all(len(shares[c]) == n for c, n in enumerate(trained.clients["test_sizes"]))
    shutil.rmtree(config.output_dir)
    with records.recording("fedcp/f5_policy"):
        shipped = run(config)
        pir2, shares2 = pir_per_round(shipped), final_personal_shares(shipped)
    assert shipped.record is not None
    np.testing.assert_allclose(pir2, pir, rtol=1e-6)  # a record keeps 7 significant digits
    for c in shares:
        np.testing.assert_array_equal(shares2[c], shares[c])
