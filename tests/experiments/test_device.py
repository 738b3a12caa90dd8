"""``--device auto|cpu|cuda|cuda:N`` (rlfast.experiments.device) and the sampler rule
(rlfast.experiments.placement).

This machine has no GPU: the CUDA branches are tested with ``torch.cuda.is_available`` and
``torch.cuda.device_count`` patched, on configuration only (``configure_train``,
``configure_resume``, ``build_experiment``, the affinity dicts, tune's ``prepare``); nothing
here trains on 'cuda'. The real runs are tiny CPU ones.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from rlfast.cli import _parser, main
from rlfast.experiments.assembly import configure_train
from rlfast.experiments import device as device_mod
from rlfast.experiments.device import (device_summary, gpu_name, learner_device, parse_device,
                                       resolve_device)
from rlfast.experiments.placement import (SAMPLER_MEASUREMENTS, SamplerMeasurement,
                                          default_affinity, default_async_affinity,
                                          default_sampler, run_affinity, sampler_for_device)

TINY_PPO = ["--steps", "256", "--n-envs", "2", "--no-progress",
            "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=128",
            "--set", "sampler.max_decorrelation_steps=10", "--set", "sampler.eval_n_envs=1",
            "--set", "sampler.eval_max_steps=510", "--set", "sampler.eval_max_trajectories=1"]


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: make torch report ``n`` CUDA devices (0: none, CUDA-built torch), with
    no nvidia-smi to name them."""
    def set_count(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.version, "cuda", "12.8")
        monkeypatch.setattr(device_mod.shutil, "which", lambda name: None)
    return set_count


# ---- parsing and resolution --------------------------------------------------------------------

@pytest.mark.parametrize("text, parsed", [
    ("auto", ("auto", None)), ("cpu", ("cpu", None)), ("cuda", ("cuda", None)),
    ("cuda:0", ("cuda", 0)), ("cuda:3", ("cuda", 3)), (" cuda:1 ", ("cuda", 1)),
    (None, ("auto", None)), (torch.device("cuda", 2), ("cuda", 2)),
])
def test_parse_device(text, parsed):
    assert parse_device(text) == parsed


@pytest.mark.parametrize("text", ["gpu", "cpu:1", "cuda:-1", "cuda:x", "", "CUDA", "mps",
                                  "auto:0", "cuda:1:2"])
def test_malformed_device_names_the_choices(text):
    with pytest.raises(ValueError) as e:
        parse_device(text)
    assert str(e.value) == (f"--device {text.strip()}: not a device; choose auto, cpu, cuda "
                            f"or cuda:N (N: the index of a GPU, e.g. cuda:1)")


def test_auto_is_gpu_0_when_cuda_is_available_else_the_cpu(gpus):
    gpus(2)
    assert resolve_device("auto") == resolve_device(None) == 0
    assert resolve_device("cpu") is None
    assert resolve_device("cuda") == 0 and resolve_device("cuda:1") == 1
    gpus(0)
    assert resolve_device("auto") is None and resolve_device("cpu") is None


def test_cuda_errors_name_why(gpus, monkeypatch):
    gpus(2)
    with pytest.raises(ValueError, match=r"^--device cuda:2: this machine has only 2 CUDA "
                                         r"devices \(cuda:0\.\.cuda:1\)$"):
        resolve_device("cuda:2")
    gpus(1)
    with pytest.raises(ValueError, match=r"only 1 CUDA device \(cuda:0\.\.cuda:0\)"):
        resolve_device("cuda:1")
    gpus(0)  # a CUDA build that sees no device
    with pytest.raises(ValueError, match=r"^--device cuda: no CUDA device is visible"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU-only build
    with pytest.raises(ValueError, match=r"^--device cuda:0: torch .* was built without "
                                         r"CUDA; use --device cpu \(or auto\)$"):
        resolve_device("cuda:0")


# ---- an affinity code wins ---------------------------------------------------------------------

GPU1 = dict(cuda_idx=1, master_cpus=[0], workers_cpus=[[0]])
CPU_ONLY = dict(cuda_idx=None, master_cpus=[0], workers_cpus=[[0]])
TWO_RANKS = [dict(cuda_idx=0), dict(cuda_idx=1)]
ASYNC_GPU0 = dict(optimizer=[dict(cuda_idx=0)], sampler=dict(cuda_idx=None))


@pytest.mark.parametrize("affinity, device, expected", [
    (GPU1, "auto", 1), (GPU1, "cuda", 1), (GPU1, "cuda:1", 1),
    (CPU_ONLY, "auto", None), (CPU_ONLY, "cpu", None),
    (TWO_RANKS, "auto", 0), (TWO_RANKS, "cuda", 0),
    (ASYNC_GPU0, "cuda:0", 0), (ASYNC_GPU0, "auto", 0),
])
def test_an_affinity_decides_the_device(gpus, affinity, device, expected):
    gpus(0)  # what the machine has does not matter: the affinity is checked elsewhere
    assert learner_device(device, affinity, code="CODE") == expected


@pytest.mark.parametrize("affinity, device, where", [
    (GPU1, "cpu", "on cuda:1"), (GPU1, "cuda:0", "on cuda:1"),
    (CPU_ONLY, "cuda", "on the CPU"), (CPU_ONLY, "cuda:0", "on the CPU"),
    (TWO_RANKS, "cuda:0", "on cuda:0, cuda:1 (2 ranks)"), (TWO_RANKS, "cpu", "cuda:0, cuda:1"),
    (ASYNC_GPU0, "cpu", "on cuda:0"),
])
def test_an_explicit_device_that_contradicts_the_code_is_an_error(affinity, device, where):
    with pytest.raises(ValueError) as e:
        learner_device(device, affinity, code="0slt_X")
    message = str(e.value)
    assert message.startswith(f"--device {device} contradicts --affinity 0slt_X, which puts "
                              f"the learner ")
    assert where in message


def test_multi_rank_runs_refuse_a_gpu_index(gpus):
    gpus(2)
    assert learner_device("cuda", multi_rank=True) == 0
    assert learner_device("auto", multi_rank=True) == 0
    with pytest.raises(ValueError, match="each rank takes its own GPU"):
        learner_device("cuda:1", multi_rank=True)


# ---- the sampler rule --------------------------------------------------------------------------

@pytest.mark.parametrize("n_envs, sampler", [
    (4, "gpu"), (8, "gpu"), (16, "gpu"), (22, "gpu"),   # at or below ~1.4 envs per core
    (23, "cpu"), (32, "cpu"), (64, "cpu"), (256, "cpu"),
])
def test_conv_agents_on_a_gpu_take_the_sampler_measured_faster(n_envs, sampler):
    assert sampler_for_device(True, n_envs, 16, cuda_idx=0) == sampler
    # Envs per core is what counts: the same ratio on 2 cores decides alike.
    assert sampler_for_device(True, n_envs, 16, cuda_idx=0) == \
        sampler_for_device(True, n_envs / 8, 2, cuda_idx=0)


def test_the_rule_reproduces_its_measured_rows():
    for row in SAMPLER_MEASUREMENTS:
        best = max(row.steps_per_s, key=row.speed)
        assert sampler_for_device(row.model == "conv", row.n_envs, row.n_cpus, 0) == best


def test_the_rule_reads_its_table_and_ties_go_to_the_cpu_sampler():
    table = [SamplerMeasurement("conv", 4, 4, {"cpu": (100.0,), "alternating": (300.0,)}),
             SamplerMeasurement("conv", 16, 4, {"cpu": (400.0,), "alternating": (200.0,)})]
    assert sampler_for_device(True, 4, 4, 0, table) == "alternating"
    assert sampler_for_device(True, 16, 4, 0, table) == "cpu"
    # 2 envs per core, halfway in log between the rows: geometric means, cpu sqrt(100 * 400)
    # = 200 against alternating sqrt(300 * 200) = 245.
    assert sampler_for_device(True, 8, 4, 0, table) == "alternating"
    assert sampler_for_device(True, 12, 4, 0, table) == "cpu"  # cpu 311 > alternating 221
    tie = [SamplerMeasurement("conv", 8, 8, {"gpu": (5.0,), "cpu": (5.0,)})]
    assert sampler_for_device(True, 8, 8, 0, tie) == "cpu"
    assert sampler_for_device(True, 8, 8, 0, []) is None


def test_no_rule_for_a_cpu_learner_or_an_mlp_agent():
    assert sampler_for_device(True, 8, 16, cuda_idx=None) is None
    assert sampler_for_device(False, 8, 16, cuda_idx=0) is None


@pytest.mark.parametrize("algo, env, cuda_idx, n_envs, runner, expected", [
    ("ppo", "atari:pong", 0, 8, "sync", "gpu"),
    ("ppo", "atari:pong", 0, 32, "sync", "cpu"),
    ("ppo", "atari:pong", None, 8, "sync", "cpu"),       # CPU learner: as before
    ("dqn", "atari:pong", 0, None, "sync", "gpu"),       # the preset's 16 envs on 16 cores
    ("dqn", "atari:pong", 0, 8, "async", "cpu"),         # the rule is for synchronous runs
    ("ppo", "CartPole-v1", 0, 8, "sync", "cpu"),         # MLP: worker-side inference
    ("sac", "Pendulum-v1", 0, 1, "sync", "serial"),      # as today
    ("a2c", "MountainCar-v0", 0, 16, "sync", "serial"),  # ENV_SAMPLER comes first
])
def test_default_sampler_precedence(algo, env, cuda_idx, n_envs, runner, expected):
    assert default_sampler(algo, env, cuda_idx=cuda_idx, n_envs=n_envs, n_cpus=16,
                           runner=runner) == expected


# ---- the affinity dicts ------------------------------------------------------------------------

def test_default_affinities_put_every_learner_on_the_gpu_under_auto(gpus):
    gpus(2)
    for sampler in ("serial", "cpu", "gpu", "alternating"):
        assert default_affinity(8, sampler)["cuda_idx"] == 0
        assert default_affinity(8, sampler, device="cpu")["cuda_idx"] is None
        assert default_affinity(8, sampler, device="cuda:1")["cuda_idx"] == 1
    async_affinity = default_async_affinity("gpu")
    assert async_affinity["optimizer"][0]["cuda_idx"] == 0
    assert async_affinity["sampler"]["cuda_idx"] is None
    assert default_async_affinity("cpu", device="cpu")["optimizer"][0]["cuda_idx"] is None
    gpus(0)
    assert default_affinity(8, "gpu")["cuda_idx"] is None
    assert default_async_affinity("cpu")["optimizer"][0]["cuda_idx"] is None


def test_run_affinity_keeps_a_code_and_checks_the_device(gpus):
    gpus(1)
    config = dict(sampler=dict(batch_B=4))
    assert run_affinity(config, "cpu", affinity=CPU_ONLY, device="auto") is CPU_ONLY
    with pytest.raises(ValueError, match="contradicts --affinity 0slt_1cpu"):
        run_affinity(config, "cpu", affinity=CPU_ONLY, device="cuda", code="0slt_1cpu")
    assert run_affinity(config, "cpu", device="auto")["cuda_idx"] == 0


def test_device_summary(monkeypatch):
    monkeypatch.setattr(device_mod.shutil, "which", lambda name: None)  # no GPU name
    assert device_summary(dict(cuda_idx=None), "cpu") == "cpu (sampler cpu)"
    assert device_summary(dict(cuda_idx=None), "gpu") == \
        "cpu (sampler gpu, actions served on cpu)"
    assert device_summary(dict(cuda_idx=1), "alternating", ) == \
        "cuda:1 (sampler alternating, actions served on cuda:1)"
    assert device_summary(dict(cuda_idx=0), "cpu", multi_rank=True) == \
        "cuda (one GPU per rank) (sampler cpu)"
    assert device_summary(TWO_RANKS, "serial") == "cuda:0, cuda:1 (sampler serial)"
    assert device_summary(ASYNC_GPU0, "gpu") == "cuda:0 (sampler gpu, actions served on cpu)"


def test_gpu_name_without_initializing_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    names = ["NVIDIA H200", "NVIDIA H200"]
    monkeypatch.setattr(device_mod.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(device_mod.subprocess, "run", lambda *a, **k: SimpleNamespace(
        returncode=0, stdout="".join(f"{n}\n" for n in names)))
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert gpu_name(1) == "NVIDIA H200"
    names[:] = ["NVIDIA A100", "NVIDIA H100"]  # mixed models in CUDA's fastest-first order
    assert gpu_name(0) is None
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert gpu_name(0) == "NVIDIA H100" and gpu_name(1) == "NVIDIA A100"
    assert gpu_name(2) is None
    monkeypatch.setattr(device_mod.shutil, "which", lambda name: None)
    assert gpu_name(0) is None


# ---- rlfast train ------------------------------------------------------------------------------

def _configure(tmp_path, *argv):
    return configure_train(_parser().parse_args(
        ["train", *argv, "--log-dir", str(tmp_path / "run"), "--no-progress"]))


def test_train_configures_the_learner_on_the_gpu_under_auto(gpus, tmp_path):
    gpus(1)
    run = _configure(tmp_path, "ppo", "CartPole-v1")
    assert run.runner.affinity["cuda_idx"] == 0
    assert run.args.sampler == "cpu"
    assert run.log_params["device"] == "cuda:0"
    assert run.device == "cuda:0 (sampler cpu)"
    run = _configure(tmp_path, "ppo", "CartPole-v1", "--device", "cpu")
    assert run.runner.affinity["cuda_idx"] is None and run.log_params["device"] == "cpu"
    assert not (tmp_path / "run").exists()  # configuring writes nothing


def test_train_picks_the_gpu_sampler_for_atari_when_it_measured_faster(gpus, tmp_path,
                                                                       monkeypatch):
    gpus(1)
    # the H200 host's 16 cores
    monkeypatch.setattr("rlfast.experiments.assembly.sampler_cpus", lambda affinity: 16)
    run = _configure(tmp_path, "ppo", "atari:pong", "--n-envs", "8")
    assert run.args.sampler == "gpu" and run.runner.affinity["cuda_idx"] == 0
    assert run.device == "cuda:0 (sampler gpu, actions served on cuda:0)"
    run = _configure(tmp_path, "ppo", "atari:pong", "--n-envs", "32")
    assert run.args.sampler == "cpu"
    run = _configure(tmp_path, "ppo", "atari:pong", "--n-envs", "8", "--sampler", "serial")
    assert run.args.sampler == "serial" and run.runner.affinity["cuda_idx"] == 0
    run = _configure(tmp_path, "ppo", "atari:pong", "--n-envs", "8", "--device", "cpu")
    assert run.args.sampler == "cpu" and run.runner.affinity["cuda_idx"] is None


def test_train_affinity_code_wins(gpus, tmp_path):
    gpus(1)
    code = "0slt_1cpu_1gpu_0hto"
    run = _configure(tmp_path, "ppo", "CartPole-v1", "--affinity", code)
    assert run.runner.affinity["cuda_idx"] == 0 and run.log_params["device"] == "cuda:0"
    with pytest.raises(ValueError, match=f"--device cpu contradicts --affinity {code}"):
        _configure(tmp_path, "ppo", "CartPole-v1", "--affinity", code, "--device", "cpu")
    run = _configure(tmp_path, "ppo", "CartPole-v1", "--affinity", "0slt_1cpu_0gpu_0hto")
    assert run.runner.affinity["cuda_idx"] is None and run.device == "cpu (sampler cpu)"


def test_train_async_and_multi_rank_devices(gpus, tmp_path):
    gpus(2)
    run = _configure(tmp_path, "dqn", "CartPole-v1", "--runner", "async")
    assert run.runner.async_affinity.optimizer[0]["cuda_idx"] == 0
    assert run.log_params["device"] == "cuda:0"
    with pytest.raises(ValueError, match="each rank takes its own GPU"):
        _configure(tmp_path, "ppo", "CartPole-v1", "--world-size", "2", "--device", "cuda:1")


@pytest.mark.parametrize("device, count, message", [
    ("cuda", 0, "--device cuda: no CUDA device is visible"),
    ("cuda:3", 2, "--device cuda:3: this machine has only 2 CUDA devices"),
    ("gpu", 2, "--device gpu: not a device; choose auto, cpu, cuda or cuda:N"),
])
def test_train_device_error_is_one_line_and_writes_nothing(gpus, tmp_path, capsys, device,
                                                           count, message):
    gpus(count)
    log_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--device", device,
                 "--log-dir", str(log_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlfast: error: {message}") and err.count("\n") == 1
    assert not log_dir.exists()


def test_train_without_a_gpu_refuses_cuda_in_a_real_process(tmp_path):
    """This machine's own torch (no GPU): the error names why, exit status 2."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    log_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "rlfast", "train", "ppo", "CartPole-v1", "--device",
                          "cuda", "--log-dir", str(log_dir)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("rlfast: error: --device cuda: ")
    assert out.stderr.count("\n") == 1
    assert not log_dir.exists()


def test_first_console_line_names_the_device(tmp_path, capsys):
    log_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--steps", "2000", "--device", "cpu",
                 "--no-progress", "--log-dir", str(log_dir)]) == 0
    captured = capsys.readouterr()
    first = captured.out.splitlines()[0]
    assert first.endswith(f"| rlfast train ppo CartPole-v1 on cpu (sampler cpu): logging to "
                          f"{log_dir}")
    assert captured.err == ""  # nothing on the other stream came before it
    assert json.loads((log_dir / "params.json").read_text())["device"] == "cpu"


# ---- resume, eval, watch, ES, tune -------------------------------------------------------------

@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("device") / "run"
    assert main(["train", "ppo", "CartPole-v1", "--sampler", "serial", "--log-dir",
                 str(run_dir), *TINY_PPO]) == 0
    return run_dir


def test_resume_resolves_the_device_again(serial_run, tmp_path, capsys, gpus):
    run_dir = tmp_path / "run"
    shutil.copytree(serial_run, run_dir)
    params = json.loads((run_dir / "params.json").read_text())
    params["device"] = "cuda:0"  # as if trained on a GPU: resuming on the CPU is no change
    (run_dir / "params.json").write_text(json.dumps(params))
    capsys.readouterr()
    assert main(["resume", str(run_dir), "--steps", "384", "--no-progress"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"rlfast resume ppo CartPole-v1 on cpu (sampler serial): logging to "
                          f"{run_dir}")
    params = json.loads((run_dir / "params.json").read_text())
    assert params["device"] == "cpu" and params["resumes"][-1]["device"] == "cpu"
    # The other way round, configured only: a CPU run resumes on the GPU.
    from rlfast.experiments.resume import configure_resume
    gpus(1)
    args = _parser().parse_args(["resume", str(serial_run), "--steps", "384", "--no-progress"])
    run = configure_resume(args)
    assert run.runner.affinity["cuda_idx"] == 0 and run.log_params["device"] == "cuda:0"
    assert run.device == "cuda:0 (sampler serial)"
    gpus(0)
    assert main(["resume", str(serial_run), "--device", "cuda", "--steps", "384"]) == 2
    assert capsys.readouterr().err.startswith("rlfast: error: --device cuda: ")


def test_eval_and_watch_take_the_device(serial_run, capsys):
    for command in ("eval", "watch"):
        assert _parser().parse_args([command, str(serial_run)]).device == "auto"
    assert main(["eval", str(serial_run), "--episodes", "1", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("agent on cpu")
    assert main(["eval", str(serial_run), "--episodes", "1"]) == 0  # auto: the CPU here
    assert capsys.readouterr().out.splitlines()[0].endswith(
        "agent on " + ("cuda:0" if torch.cuda.is_available() else "cpu"))
    for argv in (["eval", str(serial_run), "--device", "cuda:7"],
                 ["watch", str(serial_run), "--device", "gpu"]):
        assert main(argv) == 2
        assert "rlfast: error: --device " in capsys.readouterr().err


def test_es_accepts_cpu_and_auto_and_refuses_cuda(tmp_path, capsys):
    from rlfast.experiments.es_train import configure_es
    args = _parser().parse_args(["train", "cem", "CartPole-v1", "--device", "cpu",
                                 "--log-dir", str(tmp_path / "es")])
    run = configure_es(args)
    assert run.device.startswith("cpu (") and run.log_params["device"] == "cpu"
    assert main(["train", "cem", "CartPole-v1", "--device", "cuda",
                 "--log-dir", str(tmp_path / "es2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: --device cuda: rlfast train cem has no learner")
    assert not (tmp_path / "es2").exists()


def _tune_args(tmp_path, *extra):
    return _parser().parse_args(["tune", "ppo", "CartPole-v1", "--trials", "2", "--steps",
                                 "4096", "--log-dir", str(tmp_path / "tune"), *extra])


def test_tune_passes_the_device_to_every_trial(tmp_path, gpus, monkeypatch):
    from rlfast.experiments.tune import prepare
    from rlfast.experiments.tune_trials import Search
    from rlfast.launching import affinity_from_code

    gpus(0)
    setup = prepare(_tune_args(tmp_path, "--device", "auto"))
    assert setup.train_args[-2:] == ["--device", "cpu"] and setup.trial_env == {}
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda command, **kw: started.append(
        (command, kw["env"])))
    Search(setup, study=None)._start(str(tmp_path), 0, {"algo.learning_rate": 0.001})
    command, env = started[0]
    assert command[command.index("--device") + 1] == "cpu"
    assert command[command.index("--affinity") + 1] == setup.slot_codes[0]
    # On GPU 1 of two: the slots are contexts of one GPU, which the trials see as their 0.
    gpus(2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    setup = prepare(_tune_args(tmp_path / "gpu", "--device", "cuda:1", "--parallel", "2"))
    assert setup.train_args[-2:] == ["--device", "cuda:0"]
    assert [affinity_from_code(c)["cuda_idx"] for c in setup.slot_codes] == [0, 0]
    assert setup.trial_env == {"CUDA_VISIBLE_DEVICES": "1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # cuda:1 of this process is GPU 7
    assert prepare(_tune_args(tmp_path / "gpu7", "--device", "cuda:1")).trial_env == \
        {"CUDA_VISIBLE_DEVICES": "7"}
    Search(setup, study=None)._start(str(tmp_path), 1, {})
    command, env = started[1]
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert command[command.index("--device") + 1] == "cuda:0"


def test_tune_device_errors_exit_2(tmp_path, gpus, capsys):
    from rlfast.experiments.tune import prepare
    gpus(0)
    with pytest.raises(ValueError, match="^--device cuda: "):
        prepare(_tune_args(tmp_path, "--device", "cuda"))
    with pytest.raises(ValueError, match="--device cuda contradicts --affinity 0slt_"):
        prepare(_tune_args(tmp_path, "--device", "cuda", "--affinity", "1cpu_1cpr_0hto"))
    assert not (tmp_path / "tune").exists()
