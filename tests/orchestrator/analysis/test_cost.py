"""The cost estimate: parameter and FLOP counts against an independent count (a real BertModel,
bench/train_step.py's FLOPs), a paper table's steps, GPU-hours, wall time and price worked out by
hand, a measured rate preferred over FLOPs and named as the basis (only in the precision the plan
trains in), packing and concurrency, the memory warning, the price table against cluster.yaml,
and bad input in one line."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest

from orchestrator.analysis import cost
from orchestrator.analysis.cost import Encoder, Member
from trainables.data.schedule import count_steps

ROOT = Path(__file__).resolve().parents[3]
BASE = Encoder(hidden=768, layers=12, heads=12, intermediate=3072, vocab=30522)


def member(method="mcse", steps=1000, bs=64, teachers=(), **kw) -> Member:
    return Member(method, bs, 32, steps, 125, kw.pop("encoder", BASE), tuple(teachers), **kw)


def test_parameters_match_a_real_bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
                     vocab_size=500, max_position_embeddings=64)
    model = BertModel(cfg, add_pooling_layer=False)
    enc = Encoder.from_config(cfg)
    assert enc.params == sum(p.numel() for p in model.parameters())
    assert enc.non_embedding_params == sum(p.numel() for p in model.encoder.parameters())
    assert BASE.non_embedding_params == 85_054_464  # BERT-base's 85.05M


def test_flops_per_member_step_from_a_bert_base_config():
    from transformers import BertConfig

    enc = Encoder.from_config(BertConfig())  # the defaults are BERT-base's
    assert enc == BASE
    tokens = 2 * 64 * 32  # both dropout views of a batch of 64 at 32 tokens
    by_hand = 6 * 85_054_464 * tokens + 12 * 12 * 32 * 768 * tokens  # 6 N T + attention
    assert cost.train_flops(member(encoder=enc)) == by_hand == pytest.approx(2.1048e12, rel=1e-4)
    # steps and evaluations scale a run linearly: 1,000 steps, a dev evaluation every 125 (8)
    run = member(encoder=enc, steps=1000)
    assert cost.dev_evaluations(run) == 8
    assert cost.eval_flops(run) == pytest.approx(
        8 * cost.forward_flops(enc, 2_909, 16) + cost.forward_flops(enc, 27_274, 16))


def test_train_flops_are_the_benchmarks():
    spec = importlib.util.spec_from_file_location("bench_train_step_cost", ROOT / "bench" / "train_step.py")
    ts = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ts
    spec.loader.exec_module(ts)

    class Cfg:
        num_hidden_layers, hidden_size = 12, 768

    assert cost.train_flops(member()) == pytest.approx(ts.encoder_flops(BASE.non_embedding_params, Cfg, 64, 32))
    # DALR adds its teachers' forward over the batch: 2 N t + 4 n_layers L h t each
    t = 64 * 32
    extra = 2 * (2 * BASE.non_embedding_params * t + 4 * 12 * 32 * 768 * t)
    assert cost.train_flops(member("dalr", teachers=(BASE, BASE))) - cost.train_flops(member()) == pytest.approx(extra)


def test_a_paper_table_worked_out_by_hand():
    steps = count_steps(1_000_000, 145_000, 64, 3).total_steps  # Wiki1M + a Flickr30k-sized store
    assert steps == 3 * (15_625 + 2_266)
    bf16 = {"precision": "bf16"}
    arrays = [[member(steps=steps, **bf16) for _ in range(10)],
              [member("kdmcse", steps=steps, **bf16) for _ in range(10)]]
    est = cost.estimate(arrays, "A10G", 1.0, None, 0.25)
    per_run = steps * cost.train_flops(member()) + cost.eval_flops(member(steps=steps))
    assert cost.dev_evaluations(member(steps=steps)) == math.ceil(steps / 125)
    rate = 70e12 * 0.25
    assert est.gpu_hours == pytest.approx(20 * per_run / rate / 3600)
    assert est.wall_seconds == pytest.approx(10 * per_run / rate)  # both arrays at once, one GPU each
    g5 = next(r for r in est.prices if r.instance.name == "g5.xlarge")
    assert g5.nodes == 2 and g5.gpu_hours == pytest.approx(est.gpu_hours)
    assert cost.HEAD.name == "g4dn.xlarge"  # the head cluster.yaml names, billed along
    assert g5.usd == pytest.approx(est.wall_seconds / 3600 * (2 * 1.01 + 0.53))
    big = next(r for r in est.prices if r.instance.name == "g5.12xlarge")
    assert big.nodes == 1 and big.usd == pytest.approx(est.wall_seconds / 3600 * (5.67 + 0.53))
    a100 = next(r for r in est.prices if r.instance.name == "p4d.24xlarge")
    assert a100.gpu_hours == pytest.approx(est.gpu_hours * 70 / 312)
    text = cost.format_estimate(est, assumed_gpus=True)
    assert "ESTIMATE" in text and "FLOPs at 25% MFU of the A10G's 70 TFLOP/s" in text
    assert f"on A10G: {est.gpu_hours:,.1f} GPU-hours" in text and "assumed: --gpus-per-trial not given" in text
    assert re.search(r"g5\.xlarge .* \$\d+", text)
    # ten BERT-base members do not fit an A10G's 24 GB: the estimate says so, with a size that fits
    (warning,) = est.warnings
    fit = int(re.search(r"--array-size (\d+)", warning).group(1))
    one = cost.member_memory_bytes(member(**bf16))
    assert fit * one <= 24 * 2**30 * 0.9 < (fit + 1) * one
    h100 = cost.estimate(arrays, "H100", 1.0)
    assert not h100.warnings and h100.prices[0].fit == fit  # the g5 rows still say it
    assert "do not fit its GPU: --array-size" in cost.format_estimate(h100)
    assert next(r for r in h100.prices if r.instance.name == "p4d.24xlarge").fit is None  # 40 GB


def test_packing_and_concurrency():
    arrays = [[member(steps=1000)] for _ in range(4)]
    one = cost.estimate(arrays, "H100", 1.0)
    quarter = cost.estimate(arrays, "H100", 0.25)
    serial = cost.estimate(arrays, "H100", 1.0, concurrent=1)
    assert one.gpu_hours == pytest.approx(quarter.gpu_hours) == pytest.approx(serial.gpu_hours)
    assert quarter.wall_seconds == pytest.approx(4 * one.wall_seconds)  # four arrays share one GPU
    assert serial.wall_seconds == pytest.approx(4 * one.wall_seconds)
    assert [r.nodes for r in quarter.prices] == [1, 1, 1] and [r.nodes for r in one.prices] == [4, 1, 1]
    assert cost.makespan([4, 3, 2, 1], 2) == 5 and cost.makespan([3, 3, 2, 2, 2], 2) == 7  # longest first
    assert cost.makespan([], 3) == 0.0


def test_a_measured_rate_is_preferred_and_named(tmp_path):
    rows = [{"loop": "ours", "members": m, "steps_per_s_with_eval": sps, "flops_per_step": m * 2e12}
            for m, sps in ((5, 10.0), (20, 4.0))]
    rows.append({"loop": "official", "members": 1, "steps_per_s_with_eval": 9.0, "flops_per_step": 2e12})
    path = tmp_path / "h100.json"
    path.write_text(json.dumps({"env": {"device": "NVIDIA H100 80GB HBM3"}, "date": "2026-12-01",
                                "precision": "bf16", "rows": rows}))
    m = cost.read_measured(path)
    assert m.rates == {5: 50.0, 20: 80.0} and cost.gpu_of(m.device) == "H100" and m.precision == "bf16"
    # between two measured sizes the step time is interpolated (0.1 s at 5, 0.25 s at 20);
    # outside them there is no measured rate: never one borrowed from another size
    assert m.rate(5) == 50.0 and m.rate(12) == pytest.approx(12 / (0.1 + 7 * 0.15 / 15))
    assert m.rate(40) is None and m.rate(2) is None and m.rate(1) is None
    arrays = [[member(steps=1000, final_eval=False, precision="bf16") for _ in range(20)]]
    est = cost.estimate(arrays, "H100", measured=[m])
    f = cost.train_flops(member())
    assert est.measured and est.arrays[0].gpu_seconds == pytest.approx(20 * 1000 * f / (80.0 * 2e12))
    assert "measured on NVIDIA H100 80GB HBM3" in est.basis and str(path) in est.basis
    h100 = [r for r in est.prices if r.basis == "measured"]
    assert h100 == []  # no H100 instance in the cluster file: its rows stay on FLOPs
    a10g = cost.estimate(arrays, "A10G", measured=[m])
    assert not a10g.measured and "no measured rate for the A10G" in a10g.basis
    # an array size no measurement covers is priced on FLOPs, and says so beside the MFU measured
    ones = cost.estimate([[member(steps=1000, final_eval=False, precision="bf16")]], "H100", measured=[m])
    assert not ones.measured and "measured on" not in ones.basis.split(";")[0]
    assert "FLOPs at 25% MFU of the H100's 989 TFLOP/s" in ones.basis and "an assumed MFU" in ones.basis
    assert "arrays of 1 members, which no measurement covers (measured: arrays of 5 to 20" in ones.basis
    assert ones.arrays[0].gpu_seconds == pytest.approx(
        cost.array_seconds([member(steps=1000, final_eval=False, precision="bf16")], cost.GPUS["H100"], 0.25, None))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a report of bench/gpu_suite.py --json"):
        cost.read_measured(bad)


def test_gpu_names():
    assert cost.gpu_of("NVIDIA A10G") == "A10G"
    assert cost.gpu_of("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert cost.gpu_of("NVIDIA A100-SXM4-40GB") == "A100-40GB"
    assert cost.gpu_of("NVIDIA H200") == "H200" and cost.gpu_of("AMD EPYC") is None


def test_bad_input_is_one_line():
    arrays = [[member()]]
    for kw, msg in (({"gpu": "V100"}, "unknown"), ({"gpus_per_trial": 0.0}, "GPUs per array > 0"),
                    ({"mfu": 1.5}, r"--mfu 1.5 must lie in \(0, 1\]")):
        with pytest.raises(ValueError, match=msg):
            cost.estimate(arrays, **kw)
    with pytest.raises(ValueError, match="nothing to estimate"):
        cost.estimate([[]])


def test_price_table_is_the_cluster_files():
    import yaml

    text = (ROOT / "cluster.yaml").read_text()
    nodes = yaml.safe_load(text)["available_node_types"]
    by_name = {i.name: i for i in cost.INSTANCES}
    for node in nodes.values():
        inst = by_name[node["node_config"]["InstanceType"]]
        assert inst.gpus == node["resources"].get("GPU", 0)
    for inst in cost.INSTANCES:  # every price is the one the cluster file's comments state
        assert re.search(rf"{re.escape(inst.name)}\b.*~\${inst.usd_per_hour:.2f}/h", text), inst.name
    guide = (ROOT / "docs" / "cluster.md").read_text()  # the cluster guide's price table
    for inst in cost.INSTANCES[:3]:
        assert f"~${inst.usd_per_hour:.2f}/h" in guide


def test_every_kept_rate_report_reads_and_names_a_known_gpu():
    """bench/rates/*.json are read by every dry run's estimate: a kept report that does not parse
    would break them all, and one of an unknown GPU would never be used."""
    from orchestrator.run.dry_run import RATES_DIR

    files = sorted(RATES_DIR.glob("*.json"))
    if not files:
        pytest.skip("no measured rates kept in bench/rates")
    for f in files:
        m = cost.read_measured(f)
        assert cost.gpu_of(m.device) is not None, f
        assert all(r > 0 for r in m.rates.values()) and m.flops_per_member_step > 1e12, f


def test_array_size_one_is_measured_only_where_arrays_of_one_were(tmp_path):
    """``--array-size 1``: priced from the report's arrays of 1 (one a method, at their mean step
    time) when it has them, and on FLOPs at the assumed MFU, beside the MFU last measured for
    arrays, when it does not; never at the rate of an array of 5."""
    def report(with_ones: bool):
        rows = [{"loop": "ours", "members": n, "steps_per_s_with_eval": sps, "flops_per_step": n * 2e12,
                 "mfu": mfu} for n, sps, mfu in ((5, 8.0, 0.08), (20, 2.0, 0.087))]
        if with_ones:
            rows += [{"loop": "ours", "members": 1, "steps_per_s_with_eval": sps, "flops_per_step": 2e12,
                      "mfu": 0.03} for sps in (20.0, 10.0)]
        path = tmp_path / f"h200-{with_ones}.json"
        path.write_text(json.dumps({"env": {"device": "NVIDIA H200"}, "date": "2026-11-26",
                                    "precision": "bf16", "rows": rows}))
        return cost.read_measured(path)

    ones = [[member(steps=1000, final_eval=False, precision="bf16")] for _ in range(3)]
    without = cost.estimate(ones, "H200", measured=[report(False)])
    assert not without.measured and "measured at 8.7% (an array of 20 on NVIDIA H200" in without.basis
    assert "FLOPs at 25% MFU" in without.basis and "no measurement covers" in without.basis
    at_five = 20 * 1000 * cost.train_flops(member()) / (40.0 * 2e12)  # the old, borrowed rate
    assert without.gpu_hours * 3600 != pytest.approx(at_five)
    m = report(True)
    assert m.rates[1] == pytest.approx(2 / (1 / 20 + 1 / 10))  # mean step time of the arrays of 1
    measured = cost.estimate(ones, "H200", measured=[m])
    assert measured.measured and "measured on NVIDIA H200" in measured.basis
    f = cost.train_flops(member())
    assert measured.arrays[0].gpu_seconds == pytest.approx(1000 * f / (m.rates[1] * 2e12))
    three = cost.estimate([[member(steps=1000, final_eval=False, precision="bf16")] * 3], "H200", measured=[m])
    assert three.measured and "the arrays of 3 interpolated between the measured sizes" in three.basis


def bf16_report(tmp_path, sizes=((5, 8.0, 0.08), (20, 2.0, 0.087)), **top):
    rows = [{"loop": "ours", "members": n, "steps_per_s_with_eval": sps, "flops_per_step": n * 2e12, "mfu": mfu}
            for n, sps, mfu in sizes]
    path = tmp_path / "h200.json"
    path.write_text(json.dumps({"env": {"device": "NVIDIA H200"}, "date": "2026-11-26", "rows": rows, **top}))
    return cost.read_measured(path)


def test_an_fp32_plan_is_not_priced_from_bf16_rates(tmp_path):
    """The runs train in fp32 by default (TF32 matmuls): arrays measured under bf16 autocast run
    about twice as fast, so their rate does not price an fp32 plan: the FLOPs path at the TF32
    peak does, and the basis says why; a bf16 plan at a measured size is measured."""
    m = bf16_report(tmp_path, precision="bf16")
    assert m.precision == "bf16"
    fp32 = [[member(steps=1000, final_eval=False) for _ in range(5)]]  # precision: the default, fp32
    est = cost.estimate(fp32, "H200", measured=[m])
    assert not est.measured and "measured on" not in est.basis and "measured in fp32" not in est.basis
    assert "FLOPs at 25% MFU of the H200's 494.5 TFLOP/s dense TF32 peak" in est.basis
    assert "arrays were measured in bf16" in est.basis and "this plan trains in fp32" in est.basis
    f = cost.train_flops(member())
    by_hand = 5 * (1000 * f + cost.eval_flops(member(steps=1000, final_eval=False))) / (494.5e12 * 0.25)
    assert est.arrays[0].gpu_seconds == pytest.approx(by_hand)
    assert cost.GPUS["H200"].tf32_tflops * 2 == cost.GPUS["H200"].peak_tflops
    # fp32 is not faster than bf16: priced below the bf16 rate measured for its size, it is warned
    bound = 5 * 1000 * f / (40.0 * 2e12)
    assert by_hand < bound
    (warning,) = est.warnings
    assert f"fewer than the {bound / 3600:,.1f} they would take at the bf16 rate measured" in warning
    assert not cost.estimate(fp32, "H200", mfu=0.1, measured=[m]).warnings  # 0.1 prices it above
    # the same plan in bf16 (or 'auto', bf16 on a GPU) is measured at its array size
    for p in ("bf16", "auto"):
        bf = cost.estimate([[member(steps=1000, final_eval=False, precision=p) for _ in range(5)]],
                           "H200", measured=[m])
        assert bf.measured and bf.basis.startswith("measured on NVIDIA H200 in bf16"), bf.basis
        assert bf.arrays[0].gpu_seconds == pytest.approx(5 * 1000 * f / (40.0 * 2e12))
        assert not bf.warnings
    # without a report, a bf16 plan is priced at the bf16 peak, an fp32 one at the TF32 peak
    assert "989 TFLOP/s dense bf16 peak" in cost.estimate(
        [[member(precision="bf16")]], "H200").basis
    assert "494.5 TFLOP/s dense TF32 peak" in cost.estimate([[member()]], "H200").basis
    # --array-size 1 in fp32: no measurement claimed, the last measured MFU said with its precision
    one = cost.estimate([[member(steps=1000)]], "H200", measured=[m])
    assert not one.measured and "8.7% (an array of 20 on NVIDIA H200 in bf16" in one.basis
    # a report that does not say its precision prices nothing; an fp32 report prices fp32 plans
    unsaid = bf16_report(tmp_path)
    assert unsaid.precision is None
    assert not cost.estimate([[member(precision="bf16") for _ in range(5)]], "H200", measured=[unsaid]).measured
    assert cost.estimate(fp32, "H200", measured=[bf16_report(tmp_path, precision="fp32")]).measured
    # train_step.py-style reports say it in env.config: 'auto' is bf16 on CUDA, fp32 on a CPU
    assert cost.report_precision({"env": {"config": {"precision": "auto", "device": "cuda"}}}) == "bf16"
    assert cost.report_precision({"env": {"config": {"precision": "auto", "device": "cpu"}}}) == "fp32"


def test_an_fp32_member_needs_more_memory_than_a_bf16_one():
    """fp32 activations take 4 bytes a value, bf16 autocast's 2; weights, gradients and moments
    are fp32 in both; DALR's teachers are held in the precision the run trains in."""
    fp32, bf16 = member(), member(precision="bf16")
    e, tokens = BASE, 2 * 64 * 32
    extra = e.layers * (16 * 2 * tokens * e.hidden + 2 * 2 * e.heads * 32 * tokens)  # 66-34, 9-5
    assert cost.member_memory_bytes(fp32) - cost.member_memory_bytes(bf16) == pytest.approx(extra)
    teachers = member("dalr", teachers=(BASE,)), member("dalr", teachers=(BASE,), precision="bf16")
    assert (cost.member_memory_bytes(teachers[0]) - cost.member_memory_bytes(teachers[1])
            == pytest.approx(extra + 2 * BASE.params))
    with pytest.raises(ValueError, match="precision='fp16'"):
        cost.member_memory_bytes(member(precision="fp16"))
