#!/usr/bin/env python3
"""batchwise in process (python/batchwise/_inprocess.py over the compiled engine): fit, sweep and
tune on a torchvision model and on a module TorchScript cannot script, in this process.

    BATCHWISE_ENGINE=build/python/batchwise/_engine.cpython-311-x86_64-linux-gnu.so \\
        python tests/python/inprocess_test.py fit|state|oom|error|tune|options|validate|...

fit      a torchvision model and the unscriptable module fit a CPU budget exactly: the batch found
         (binsearch, a multiple of 8) peaks within target x budget, and that batch plus 8 does not
state    after fit, sweep and tune the model's tensors, gradients, training modes, the optimizer's
         state and torch's, Python's and NumPy's RNGs are bit-identical to before
oom      trials that ran out of memory leave no counted byte held; the engine's count is where it was;
         the process's other tensors are not the budget's
error    an exception in the model's forward (and in the loss) is a batchwise.TrainingError naming
         the model, raised from the user's exception, with no C++ trace; the model is as it was
tune     tune on a map-style Dataset with held-out data: a recommendation from a race that trained,
         the learning rate, the report's JSON (the CLI's schema), its HTML and table; TorchScript
         is never called
interrupt  Ctrl-C (SIGINT) during tune: KeyboardInterrupt, the model restored; a SIGTERM handler's
         SystemExit the same, raised again as it was
epochs   tune with epochs=3, lr_schedule="cosine": the run race answers for the user's run
options  options are checked by name and type, with the fix in the message
validate validate's full runs (epochs=1, cosine) at two batches, judged on the held-out data given,
         with a final accuracy and a time each and the fastest good batch recommended; noise's
         gradient noise scale; both leave the model as it was, and name their options in errors
lightning  batchwise.lightning.fit, tune and validate on a LightningModule and its DataModule (its
         training_step, its first optimizer, the val_dataloader's data for the race and validation)
Skipped (77) without torch, torchvision or the engine.
"""
import copy
import json
import os
import random
import stat
import sys
import tempfile
import threading
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
failures = []


def case(name, condition, detail=""):
    print(f"{'ok  ' if condition else 'FAIL'} {name}" + ("" if condition else f": {detail}"))
    if not condition:
        failures.append(name)


try:
    import torch
    import torchvision
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(SKIP)
if not os.environ.get("BATCHWISE_ENGINE"):
    print("skipped: BATCHWISE_ENGINE does not name the built engine")
    sys.exit(SKIP)
import batchwise  # noqa: E402

# One intra-op thread: the suite runs two tests at once on two cores, often beside other work, and a
# parallel region of two threads then waits on a descheduled thread at every barrier (steps of this
# file's small models slowed from under 1 ms to 200 ms under two busy loops, and a tune ran past its
# timeout). These tests assert behaviour, never a speed, so one thread loses them nothing.
torch.set_num_threads(1)


class Branchy(torch.nn.Module):
    """Python control flow over a list of tensors: the branches are ordered by their output's norm
    with a lambda, which torch.jit.script cannot compile."""

    def __init__(self, features=48, classes=10):
        super().__init__()
        self.branches = torch.nn.ModuleList([torch.nn.Linear(features, 64) for _ in range(3)])
        self.norm = torch.nn.BatchNorm1d(192)
        self.head = torch.nn.Linear(192, classes)

    def forward(self, x):
        outs = sorted((torch.relu(b(x)) for b in self.branches), key=lambda t: float(t.detach().norm()))
        return self.head(self.norm(torch.cat(outs, dim=1)))


class InBackward(torch.autograd.Function):
    """The identity, whose backward runs `InBackward.hook(gradient)` in Python on autograd's side, as a
    custom Function's backward, a hook or torch.utils.checkpoint's recomputation does."""
    hook = None

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, gradient):
        if InBackward.hook:
            InBackward.hook(gradient)
        return gradient


class WithBackward(Branchy):
    def forward(self, x):
        return InBackward.apply(super().forward(x))


def branchy_data(n=2048, features=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return x, (x[:, :10] + 0.5 * torch.randn(n, 10, generator=g)).argmax(1)


def images(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def refused(checks):
    """Each (call, exception type, text): the call raises that type with the text in its message."""
    for call, kind, text in checks:
        try:
            call()
            case(f"refused with {text!r}", False, "it ran")
        except kind as e:
            case(f"refused with {text!r}", text in str(e), str(e))
        except Exception as e:  # noqa: BLE001
            case(f"refused with {text!r}", False, f"{type(e).__name__}: {e}")


def snapshot(model, optimizer):
    return {"tensors": {k: v.clone() for k, v in model.state_dict(keep_vars=False).items()},
            "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            "modes": [m.training for m in model.modules()],
            "optimizer": copy.deepcopy(optimizer.state_dict()),
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_fit():
    try:
        torch.jit.script(Branchy())
        case("the custom module is one TorchScript cannot script", False, "torch.jit.script compiled it")
    except Exception:
        case("the custom module is one TorchScript cannot script", True)
    torch.manual_seed(0)
    vision = torchvision.models.mobilenet_v3_small(num_classes=10)
    workloads = [("mobilenet_v3_small", vision, torch.optim.SGD(vision.parameters(), lr=0.05, momentum=0.9), images(),
                  "96MiB"),
                 ("Branchy", Branchy(), None, branchy_data(), "1536KiB")]
    for name, model, optimizer, data, budget in workloads:
        optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3)
        report = batchwise.fit(model, optimizer, data, memory_budget=budget, mode="binsearch", multiple_of=8,
                               min=8, max=512, progress=False)
        b = report.fit.batch
        case(f"{name}: fit finds a batch, a multiple of 8", report.fit.outcome == "fits" and b and b % 8 == 0,
             report.to_json()[:300])
        if not b:
            continue
        limit = report.target * report.budget_bytes
        check = batchwise.sweep(model, optimizer, data, memory_budget=budget, batch_sizes=[b, b + 8], steps=2,
                                repetitions=1, min_time=0, progress=False)
        peaks = {p.batch: (p.outcome, p.peak_bytes) for p in check.sweep.points}
        fits = peaks[b][0] == "ok" and peaks[b][1] <= limit
        over = peaks[b + 8][0] == "oom" or peaks[b + 8][1] > limit
        case(f"{name}: batch {b} peaks within target x budget and batch {b + 8} does not", fits and over,
             f"limit {limit:.0f}, peaks {peaks}")
        case(f"{name}: the report names the model", report.workload.model == type(model).__name__,
             report.workload.model)


def test_state():
    torch.manual_seed(1)
    model = Branchy()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = branchy_data()
    for _ in range(3):  # a model mid-training: gradients, Adam's state, a frozen BatchNorm
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[:64]), y[:64]).backward()
        optimizer.step()
    model.norm.eval()
    random.seed(7)
    try:
        import numpy
        numpy.random.seed(7)
        numpy_before = numpy.random.get_state()[1].copy()
    except ImportError:
        numpy = None
    before = snapshot(model, optimizer)
    batchwise.fit(model, optimizer, (x, y), memory_budget="4MiB", max=256, progress=False)
    case("after fit: the model, its gradients and modes, the optimizer and the RNGs are bit-identical",
         same(before, snapshot(model, optimizer)))
    batchwise.sweep(model, optimizer, (x, y), batch_sizes=[16, 64], steps=2, repetitions=1, progress=False)
    case("after sweep: bit-identical", same(before, snapshot(model, optimizer)))
    batchwise.tune(model, optimizer, (x, y), memory_budget="4MiB", max=256, advice_budget=2, progress=False)
    case("after tune: bit-identical", same(before, snapshot(model, optimizer)))
    case("the frozen BatchNorm is still in eval mode", not model.norm.training and model.training)
    # The tensors' own storage comes back after a call: a model in shared memory stays shared, and parameters that
    # are views of one flat tensor stay so (each call had left them in new memory of its own)
    shared = Branchy()
    shared.share_memory()
    flat = torch.zeros(sum(p.numel() for p in shared.parameters()))
    offset = 0
    with torch.no_grad():
        for p in shared.parameters():
            view = flat[offset:offset + p.numel()].view_as(p)
            view.copy_(p)
            p.data = view
            offset += p.numel()
    flat.share_memory_()
    values = [p.detach().clone() for p in shared.parameters()]
    batchwise.fit(shared, torch.optim.SGD(shared.parameters(), lr=0.1), (x, y), memory_budget="4MiB", max=64,
                  progress=False)
    # An optimizer with a scheduler made on it (OneCycleLR steps at once, 25x below its peak): the rate raced and
    # reported is the scheduler's peak, as batchwise.lightning takes it; the group's own lr is back after the call
    cycled = Branchy()
    cycling = torch.optim.SGD(cycled.parameters(), lr=0.1)
    torch.optim.lr_scheduler.OneCycleLR(cycling, 0.1, total_steps=100)
    first = cycling.param_groups[0]["lr"]
    report = batchwise.sweep(cycled, cycling, (x, y), batch_sizes=[16], steps=2, repetitions=1, progress=False)
    case("a scheduler's optimizer is raced at the scheduler's peak, its own lr put back, and not marked as stepped",
         report.workload.lr == 0.1 and cycling.param_groups[0]["lr"] == first < 0.01
         and not getattr(cycling, "_opt_called", False),
         (report.workload.lr, cycling.param_groups[0]["lr"], getattr(cycling, "_opt_called", None)))
    case("after a call, parameters in shared memory are still in it, views of their flat tensor, values unchanged",
         all(p.is_shared() and p.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
             for p in shared.parameters()) and all(torch.equal(a, p) for a, p in zip(values, shared.parameters())))
    # The optimizer's state as the optimizer keeps it: a float32 momentum on bfloat16 parameters stays float32
    # (torch's load_state_dict casts it to the parameter's type, and had rounded it), a wrapper that shares its
    # inner optimizer's state dict still shares it (the restores had gone into a new dict the inner optimizer never
    # read), and a key of the state that is no parameter's is counted, not taken for a per-parameter dict
    class Fp32Momentum(torch.optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, dict(lr=lr))

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    buf = self.state[p].setdefault("momentum", torch.zeros_like(p, dtype=torch.float32))
                    buf.mul_(0.9).add_(p.grad.float())
                    p.add_(buf.to(p.dtype), alpha=-group["lr"])

    class Wrapper(torch.optim.Optimizer):
        def __init__(self, inner):
            self.inner = inner
            super().__init__(inner.param_groups, inner.defaults)
            self.param_groups, self.state = inner.param_groups, inner.state

        def step(self, closure=None):
            return self.inner.step(closure)

    half = Branchy().to(torch.bfloat16)
    inner = Fp32Momentum(half.parameters(), lr=0.01)
    torch.nn.functional.cross_entropy(half(x[:64].to(torch.bfloat16)).float(), y[:64]).backward()
    inner.step()
    inner.state["step_count"] = torch.tensor(3)
    wrapper = Wrapper(inner)
    momentum = {k: v["momentum"].clone() for k, v in inner.state.items() if isinstance(v, dict)}
    batchwise.sweep(half, wrapper, (x, y), batch_sizes=[16, 32], steps=2, repetitions=1, progress=False)
    case("an optimizer's float32 state on bfloat16 parameters comes back float32, bit-identical",
         all(inner.state[k]["momentum"].dtype == torch.float32 and torch.equal(inner.state[k]["momentum"], v)
             for k, v in momentum.items()), {k: inner.state[k]["momentum"].dtype for k in momentum})
    case("a wrapper that shares its inner optimizer's state still shares it, and the inner one is as it was",
         wrapper.state is inner.state and len([v for v in inner.state.values() if isinstance(v, dict)]) ==
         len(momentum) and torch.equal(inner.state["step_count"], torch.tensor(3)))
    # The engine's CPU allocator, installed by the first call, reports to torch's profiler as c10's own does (a
    # profile of memory had seen none after a call)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        ones = torch.ones(1_000_000)
        del ones
    allocated = sum(e.cpu_memory_usage for e in profiled.events() if e.cpu_memory_usage > 0)
    case("torch.profiler's memory profile still sees CPU allocations", allocated >= 4_000_000, allocated)
    if numpy is not None:
        case("NumPy's RNG is as it was", (numpy.random.get_state()[1] == numpy_before).all())
    # and the model trains on as it would have: one more step matches a copy that batchwise never saw
    twin, twin_opt = copy.deepcopy(model), None
    twin_opt = torch.optim.Adam(twin.parameters(), lr=1e-3)
    twin_opt.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # not shared
    for m, o in ((model, optimizer), (twin, twin_opt)):
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(x[:64]), y[:64]).backward()
        o.step()
    case("the next training step is the one it would have been", same(model.state_dict(), twin.state_dict()))
    # Param groups at their own rates: every rate the engine trains at keeps each group's ratio to
    # group 0's (the head at a tenth of the body's, a frozen group at 0), and the rates come back.
    model = Branchy()
    groups = [{"params": model.norm.parameters(), "lr": 0.0}, {"params": model.branches.parameters(), "lr": 0.1},
              {"params": model.head.parameters(), "lr": 0.01}]  # a frozen group first: the rate is the next's
    optimizer = torch.optim.SGD(groups, momentum=0.5)
    seen, step = set(), optimizer.step
    optimizer.step = lambda *a, **k: (seen.add(tuple(g["lr"] for g in optimizer.param_groups)), step(*a, **k))[1]
    report = batchwise.tune(model, optimizer, (x, y), memory_budget="4MiB", max=256, advice_budget=2, no_noise=True,
                            progress=False)
    case("param groups train at the first trained group's rate times their ratio to it",
         len({r[1] for r in seen}) > 1 and all(abs(head - body / 10) <= 1e-12 * body and frozen == 0
                                               for frozen, body, head in seen), sorted(seen)[:5])
    case("and their rates are as they were", [g["lr"] for g in optimizer.param_groups] == [0.0, 0.1, 0.01],
         [g["lr"] for g in optimizer.param_groups])
    case("the report's rate is the first trained group's", report.workload.lr == 0.1, report.workload.lr)
    case("the run plan says whose rate it names and the others' ratios",
         "the rates above are param group 1's, the first whose rate is above 0; every other group keeps its ratio to "
         "it, as batchwise sets them: group 0 at 0 (frozen), group 2 at 0.1x" in report.run_plan.notes,
         report.run_plan.notes)
    # The groups are the very objects they were: a handle kept on one (to unfreeze a backbone later) still
    # drives the optimizer (torch's load_state_dict, after every trial, had made new ones)
    kept, kept_list = optimizer.param_groups[0], optimizer.param_groups
    batchwise.fit(model, optimizer, (x, y), memory_budget="4MiB", max=64, progress=False)
    kept["lr"] = 0.02
    case("the optimizer's param_groups and each group's dict are the objects they were",
         optimizer.param_groups is kept_list and optimizer.param_groups[0] is kept and
         optimizer.param_groups[0]["lr"] == 0.02, [g["lr"] for g in optimizer.param_groups])
    kept["lr"] = 0.0
    # Each parameter's state dict too: a handle on optimizer.state[p] reads the optimizer's steps after the call (it
    # had been a stale copy: its "step" 1 where the optimizer's was 2)
    adam_model = Branchy()
    adam = torch.optim.Adam(adam_model.parameters(), lr=1e-3)
    torch.nn.functional.cross_entropy(adam_model(x[:32]), y[:32]).backward()
    adam.step()
    first = next(iter(adam_model.parameters()))
    handle = adam.state[first]
    batchwise.fit(adam_model, adam, (x, y), memory_budget="4MiB", max=64, progress=False)
    adam.step()
    case("and each parameter's state dict is the object it was",
         adam.state[first] is handle and float(handle["step"]) == 2.0, (adam.state[first] is handle, handle["step"]))
    # Called under torch.no_grad() or torch.inference_mode() (an evaluation block's): the call trains, and the
    # model trains on after it (nothing had trained under no_grad, and under inference_mode the parameters came back
    # inference tensors, which never train again); the caller's modes are as they were
    for name, mode in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
        with mode():
            under = batchwise.fit(model, optimizer, (x, y), memory_budget="4MiB", max=64, progress=False)
            still = not torch.is_grad_enabled()
        case(f"under torch.{name}() a call trains and the mode is the caller's after it",
             under.fit.batch == 64 and still and torch.is_grad_enabled(), under.fit.message)
        case(f"and after torch.{name}() the parameters are no inference tensors",
             not any(p.is_inference() for p in model.parameters()))
    # A process forked while another thread's call runs runs none: its lock is free (every call there had been
    # refused, "another batchwise call is running")
    if hasattr(os, "fork"):
        forked = []

        def fork_mid_call(line):
            if not forked:
                pid = os.fork()
                if pid == 0:  # no training here (OpenMP's threads do not survive a fork): the lock and the limit
                    code = 0
                    try:
                        code = 0 if batchwise._inprocess._ONE_CALL.acquire(blocking=False) else 2
                        torch.empty(1 << 22)  # 16 MiB, past the trial's 4 MiB budget
                    except BaseException:
                        code = 1
                    os._exit(code)
                forked.append(os.waitpid(pid, 0)[1])
        batchwise.fit(model, optimizer, (x, y), memory_budget="4MiB", max=64, progress=fork_mid_call)
        case("a process forked during a call is free of its lock and its memory limit", forked == [0], forked)
    # A frozen bf16 part declared ahead of the float32 model it serves: the data take the trained parameters'
    # type (they had taken the first parameter's, bf16, and the float32 model refused them)
    class Taught(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.teacher = torch.nn.Linear(48, 10).to(torch.bfloat16).requires_grad_(False)
            self.student = torch.nn.Linear(48, 10)

        def forward(self, x):
            with torch.no_grad():
                hint = self.teacher(x.to(torch.bfloat16)).float()
            return self.student(x) + 0 * hint
    taught = Taught()
    taught_fit = batchwise.fit(taught, torch.optim.SGD(taught.student.parameters(), lr=0.1), (x, y), max=64,
                               progress=False)
    case("a frozen bf16 part ahead of a float32 model: its data are float32, and it fits",
         taught_fit.fit.batch == 64, taught_fit.fit.message)
    # A forward that assigns a new tensor to its buffer (an average of its outputs) swaps the object:
    # the buffer it began with is back in its seat, with its value, and no trial saw another's average
    # (the engine had restored the object it was given, and the model kept the last trial's)
    class Averaging(Branchy):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean_out", torch.zeros(10))

        def forward(self, x):
            out = super().forward(x)
            self.mean_out = 0.9 * self.mean_out + 0.1 * out.detach().mean(0)
            return out
    averaging = Averaging()
    start = averaging.mean_out
    batchwise.fit(averaging, torch.optim.SGD(averaging.parameters(), lr=0.1), (x, y), memory_budget="4MiB", max=64,
                  progress=False)
    # A second call while one runs (another thread's, here one from the first's progress callback) is refused
    # before it reads its data or counts its model: its 64 MiB had been counted into the running call's peak
    second = []

    def calls_again(line):
        if not second:
            big = torch.nn.Linear(4096, 4096)
            try:
                batchwise.fit(big, torch.optim.SGD(big.parameters(), lr=0.1), (torch.randn(8, 4096),
                              torch.randint(0, 10, (8,))), progress=False)
                second.append("ran")
            except batchwise.ConfigError as e:
                second.append(str(e))
    small = batchwise.sweep(model, optimizer, (x, y), batch_sizes=[16, 64], steps=2, repetitions=1,
                            progress=calls_again)
    case("a second call in the process is refused", second[:1] == [
        "batchwise.fit: another batchwise call (fit, sweep, tune, noise or validate) is running in this process; "
        "they run one at a time (the CPU budget is counted process-wide)"], second)
    case("and the running call's figures are its own", all(p.peak_bytes < 16 << 20 for p in small.sweep.points),
         [p.peak_bytes for p in small.sweep.points])
    case("a buffer a forward replaced is back, as it was", averaging.mean_out is start and
         torch.equal(start, torch.zeros(10)), averaging.mean_out)
    case("the run plan says the optimizer's momentum, not SGD's default", report.run_plan.optimizer.momentum == 0.5
         and "momentum 0.5: as it is" in report.run_plan.rows[0].optimizer_settings, report.run_plan.to_dict())


def test_oom():
    from batchwise import _inprocess
    engine = _inprocess._engine()
    model = Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = branchy_data()
    batchwise.fit(model, optimizer, data, memory_budget="2MiB", min=2, max=64, progress=False)  # its tensors counted
    held = engine.counted_bytes()
    report = batchwise.fit(model, optimizer, data, memory_budget="2MiB", mode="power", target=1.0, min=2, max=4096,
                           progress=False)
    ooms = [t.batch for t in report.fit.trials if t.outcome == "oom"]
    case("the fit's trials ran out of the 2 MiB budget", bool(ooms), [t.outcome for t in report.fit.trials])
    case("after them no counted byte stays held", engine.counted_bytes() == held,
         f"{engine.counted_bytes() - held} bytes more than before")
    for _ in range(3):
        batchwise.sweep(model, optimizer, data, memory_budget="2MiB", batch_sizes=[4096], steps=1, repetitions=1,
                        progress=False)
    case("three more out-of-memory trials hold nothing either", engine.counted_bytes() == held,
         f"{engine.counted_bytes() - held} bytes more")
    # The budget is this model's training's: 16 MiB of other tensors made since the engine loaded
    # (counted) change neither the batch found nor its peak.
    first = batchwise.fit(model, optimizer, data, memory_budget="2MiB", min=2, mode="binsearch", progress=False)
    others = [torch.zeros(2**20) for _ in range(4)]
    second = batchwise.fit(model, optimizer, data, memory_budget="2MiB", min=2, mode="binsearch", progress=False)
    case("other tensors in the process are not the budget's", engine.counted_bytes() >= held + 2**24 and
         (first.fit.batch, first.fit.trials[-1].peak_bytes) == (second.fit.batch, second.fit.trials[-1].peak_bytes),
         f"{first.fit.batch} then {second.fit.batch}")
    del others

    # Out of memory in Python inside backward (a recomputation, a hook's tensors) reaches the engine
    # as torch's python_error from autograd: it is the trial's out-of-memory outcome, not an error.
    InBackward.hook = lambda gradient: torch.empty(gradient.shape[0], 2**14)  # 64 KiB a sample
    try:
        model = WithBackward()
        report = batchwise.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), data, memory_budget="4MiB",
                               mode="power", target=1.0, min=2, max=4096, progress=False)
    finally:
        InBackward.hook = None
    outcomes = [t.outcome for t in report.fit.trials]
    case("out of memory inside backward is an out-of-memory trial", "oom" in outcomes and "error" not in outcomes
         and 16 <= report.fit.batch <= 64, f"batch {report.fit.batch}: {outcomes}")

    # A RuntimeError in an allocator's words (cuBLAS's failed workspace) is out of memory too, as the
    # C++ trials read it: not the user's error, which had ended the call
    class CublasBound(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(48, 10)

        def forward(self, x):
            if x.shape[0] > 32:
                raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
            return self.layer(x)
    model = CublasBound()
    report = batchwise.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), data, mode="binsearch", max=256,
                           progress=False)
    case("an allocator's RuntimeError is an out-of-memory trial", report.fit.batch == 32 and
         "error" not in [t.outcome for t in report.fit.trials], [(t.batch, t.outcome) for t in report.fit.trials])


class Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(48, 10)

    def forward(self, x):
        if x.shape[0] > 32:
            raise ValueError(f"no batches above 32 here (got {x.shape[0]})")
        return self.layer(x)


# The user's forward raises on the samples that hold NaN, in the check before anything trains: the error is the
# call's, raised from the user's (it had stayed in the engine's failure slot: a ModelError without its cause, its
# tensors held, and the interpreter aborted at exit).
RAISES_ON_NAN = """
import sys, torch
sys.path.insert(0, {here!r})
import inprocess_test as T, batchwise
class RefusesNaN(T.Branchy):
    def forward(self, x):
        if torch.isnan(x).any():
            raise ValueError("my model refuses NaN")
        return super().forward(x)
x, y = T.branchy_data(256)
x[3, 0] = float("nan")
model = RefusesNaN()
try:
    batchwise.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), (x, y), max=32, progress=False)
except batchwise.TrainingError as e:
    print("TrainingError from", type(e.__cause__).__name__, "|", e)
"""


def test_error():
    import subprocess
    out = subprocess.run([sys.executable, "-c", RAISES_ON_NAN.format(here=HERE)], capture_output=True, text=True,
                         timeout=240)
    case("a forward that raises in the check of NaN samples: a TrainingError from the user's, and a clean exit",
         out.returncode == 0 and "TrainingError from ValueError | batchwise.fit: RefusesNaN.forward raised "
         "ValueError: my model refuses NaN" in out.stdout, (out.returncode, out.stdout, out.stderr[-2000:]))
    class DictOut(Branchy):  # a dict without logits: named, with the fix (the engine's words had named none)
        def forward(self, x):
            return {"scores": super().forward(x)}
    dict_out = DictOut()
    try:
        batchwise.sweep(dict_out, torch.optim.SGD(dict_out.parameters(), lr=0.1), branchy_data(256), batch_sizes=[16],
                        steps=2, repetitions=1, progress=False)
        case("a forward that returns a dict without logits raises", False, "sweep returned")
    except batchwise.TrainingError as e:  # the sweep's one batch failed so: its trial's message
        case("a dict output without logits names its keys and the fix",
             "DictOut.forward's output is a dict of 'scores', without 'logits': return the logits (a tensor), or a "
             "dict with 'logits'" in str(e), str(e))
    # Refused before anything runs, each by its cause: a lazy module not shaped (the probe had shaped and initialised
    # it, the RNGs then put back), a sparse gradient (torch's "nbytes is not defined for sparse tensors" in a trial),
    # L-BFGS's closure (its step raised "missing 1 required positional argument", read as the user's error)
    class Sparse(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.fc = torch.nn.Embedding(100, 8, sparse=True), torch.nn.Linear(8, 5)
        def forward(self, i):
            return self.fc(self.embed(i).mean(1))
    lazy, sparse, dense = (torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.ReLU(), torch.nn.Linear(8, 5)),
                           Sparse(), Branchy())
    for name, model, optimizer, data, said in (
            ("a lazy module not shaped yet", lazy, torch.optim.SGD(lazy.parameters(), lr=0.1),
             (torch.randn(64, 20), torch.randint(0, 5, (64,))),
             "Sequential's 0.weight is a lazy module's parameter not shaped yet"),
            ("an embedding with sparse gradients", sparse, torch.optim.SGD(sparse.parameters(), lr=0.1, momentum=0.9),
             (torch.randint(0, 100, (64, 4)), torch.randint(0, 5, (64,))),
             "Sparse: embed (sparse=True): sparse gradients are not supported"),
            ("L-BFGS", dense, torch.optim.LBFGS(dense.parameters()), branchy_data(64),
             "LBFGS's step() needs a closure that evaluates the model again")):
        try:
            batchwise.fit(model, optimizer, data, memory_budget="16MiB", max=64, progress=False)
            case(f"{name} is refused", False, "fit returned")
        except ValueError as e:
            case(f"{name} is refused by its cause, before anything runs", said in str(e), str(e))
    case("and the lazy module is left unshaped", isinstance(lazy[0].weight, torch.nn.parameter.UninitializedParameter))
    frozen = Sparse()  # a frozen sparse embedding makes no gradient: it trains
    frozen.embed.weight.requires_grad_(False)
    report = batchwise.fit(frozen, torch.optim.SGD(frozen.fc.parameters(), lr=0.1),
                           (torch.randint(0, 100, (64, 4)), torch.randint(0, 5, (64,))), memory_budget="16MiB", max=64,
                           progress=False)
    case("a frozen sparse embedding is not refused", report.fit.batch is not None, report.fit.message)
    model = Raises()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = snapshot(model, optimizer)
    try:
        batchwise.fit(model, optimizer, branchy_data(), memory_budget="16MiB", progress=False)
        case("an exception in forward raises", False, "fit returned")
    except batchwise.TrainingError as e:
        text = str(e)
        case("it is a TrainingError naming the model's forward and the user's error",
             "Raises.forward raised ValueError: no batches above 32 here" in text, text)
        case("raised from the user's exception, traceback and all",
             isinstance(e.__cause__, ValueError) and e.__cause__.__traceback__ is not None, repr(e.__cause__))
        case("no C++ trace in it", "Exception raised from" not in text and "c10::" not in text, text)
    case("the model is as it was", same(before, snapshot(model, optimizer)))

    # Putting the state back raised (the user's optimizer's load_state_dict): the state is as the trial
    # left it, and the error says so rather than that it is as it was.
    class Unloadable(torch.optim.SGD):
        def load_state_dict(self, state_dict):
            raise RuntimeError("this optimizer cannot load a state")
    model = Branchy()
    try:
        batchwise.fit(model, Unloadable(model.parameters(), lr=0.1), branchy_data(), memory_budget="16MiB", max=64,
                      progress=False)
        case("an optimizer that cannot load its state raises", False, "fit returned")
    except batchwise.TrainingError as e:
        text = str(e)
        case("a restore that raised is named, and the state not said to be as it was",
             "Unloadable.load_state_dict raised RuntimeError: this optimizer cannot load a state (so the optimizer's "
             "state could not be put back and is as the trial left it: set it again before training on; the rest is "
             "as it was)" in text, text)

    # Raised in Python inside backward (before, an error trial reading "python_error", and the fit
    # went on below it).
    def refuse(gradient):
        if gradient.shape[0] > 32:
            raise ValueError(f"no gradients above 32 here (got {gradient.shape[0]})")
    InBackward.hook = refuse
    try:
        model = WithBackward()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        before = snapshot(model, optimizer)
        batchwise.fit(model, optimizer, branchy_data(), memory_budget="16MiB", progress=False)
        case("an exception in backward raises", False, "fit returned")
    except batchwise.TrainingError as e:
        case("an exception in backward names the backward pass and the user's error",
             "WithBackward's backward pass raised ValueError: no gradients above 32 here" in str(e)
             and isinstance(e.__cause__, ValueError), str(e))
        case("and the model is as it was", same(before, snapshot(model, optimizer)))
    finally:
        InBackward.hook = None

    def bad_loss(output, target):
        raise KeyError("labels")
    try:
        batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), branchy_data(), loss=bad_loss,
                        batch_sizes=[8], progress=False)
        case("an exception in the loss raises", False, "sweep returned")
    except batchwise.TrainingError as e:
        case("an exception in the loss names the loss", "Branchy's loss raised KeyError" in str(e), str(e))

    # Code of the user's that raised ends the call: none of it runs again (the sweep ran five more
    # trials, the noise scale after them, 541 forwards in all, before the error came).
    class Later(Branchy):
        calls = 0

        def forward(self, x):
            Later.calls += 1
            if Later.calls == 30:
                raise ValueError("the 30th forward")
            return super().forward(x)
    model = Later()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = snapshot(model, optimizer)
    try:
        batchwise.tune(model, optimizer, branchy_data(), memory_budget="16MiB", max=64, advice_budget=2,
                       progress=False)
        case("a forward that raises mid-sweep raises", False, "tune returned")
    except batchwise.TrainingError as e:
        case("a forward that raises mid-call ends it: no forward after it", Later.calls == 30,
             f"{Later.calls} forwards; {e}")
    case("and the model and its optimizer are as they were", same(before, snapshot(model, optimizer)))

    # A trial that failed without an exception of the user's (a loss of one value a sample, a loss
    # that is not a number) trained nothing: an error with the trial's message, as the CLI's exit 1,
    # not a report whose batch is None; the report is the error's.
    model = Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = snapshot(model, optimizer)
    calls = {
        "sweep": lambda: batchwise.sweep(model, optimizer, branchy_data(), loss=lambda o, t: o.sum() * float("nan"),
                                         batch_sizes=[8, 16], progress=False),
        # before, a report whose noise scale was "not measured:" with nothing after it
        "noise_scale": lambda: batchwise.noise(model, optimizer, branchy_data(), loss=lambda o, t: o.sum() * float("nan"),
                                               batch=64, micro_batch=16, noise_steps=3, progress=False),
    }
    expected = {"sweep": "batchwise.sweep: no batch trained: 2 of 2 swept batches failed (batch 8: the training loss "
                         "is NaN at the first step",
                "noise_scale": "batchwise.noise: the training loss became NaN at step 1 of 3 (batch 64)"}
    for name, call in calls.items():
        try:
            call()
            case(f"a {name} that trained nothing raises", False, f"{name} returned")
        except batchwise.TrainingError as e:
            case(f"a {name} that trained nothing raises its trial's message",
                 str(e).startswith(f"batchwise.{name.split('_')[0]}: ") and expected[name] in str(e),
                 str(e))
            case("with the report", getattr(e.report, name) is not None, repr(e.report))
    case("the model is as it was after all three", same(before, snapshot(model, optimizer)))
    # One loss a sample (reduction="none") is the user's error and ends the call at its first trial: it had
    # trained at batch 1 alone, and fit answered 1 after every larger batch failed
    try:
        batchwise.fit(model, optimizer, branchy_data(), loss=torch.nn.CrossEntropyLoss(reduction="none"),
                      memory_budget="16MiB", max=64, progress=False)
        case("a loss of one value a sample raises", False, "fit returned")
    except batchwise.TrainingError as e:
        case("a loss of one value a sample raises, naming its shape and the fix",
             "Branchy's loss raised ValueError: it gave a tensor of shape [" in str(e)
             and "], not one number: reduce it (its .mean(), or the loss's reduction='mean')" in str(e), str(e))
    case("and the model is as it was", same(before, snapshot(model, optimizer)))
    try:  # as the CLI's validate exits 1 where no run trained
        batchwise.validate(model, optimizer, branchy_data(), held_out=branchy_data(256, seed=1), batch_sizes=[32, 64],
                           epochs=0.1, loss=lambda o, t: o.sum() * float("nan"), progress=False)
        case("a validate in which no run trained raises", False, "validate returned")
    except batchwise.TrainingError as e:
        case("a validate in which no run trained raises its runs' message",
             str(e).startswith("batchwise.validate: no run trained: 2 of 2 validation runs failed (batch 32: the "
                               "training loss became NaN") and e.report.validation is not None, str(e))
    case("and the model is as it was", same(before, snapshot(model, optimizer)))
    plain = torch.nn.Sequential(torch.nn.Linear(48, 10))  # no BatchNorm: its fit goes down to batch 1
    try:
        batchwise.fit(plain, torch.optim.SGD(plain.parameters(), lr=0.1), branchy_data(),
                      loss=torch.nn.CrossEntropyLoss(reduction="none"), memory_budget="16MiB", max=64, progress=False)
        case("a fit whose loss is one a sample raises at batch 1 too", False, "fit returned")
    except batchwise.TrainingError as e:
        case("a fit whose loss is one a sample raises at batch 1 too", "not one number" in str(e), str(e))
    class Diverging:  # finite for three steps, then infinite: "lower --lr" is the optimizer's lr here
        calls = 0

        def __call__(self, output, target):
            Diverging.calls += 1
            loss = torch.nn.functional.cross_entropy(output, target)
            return loss if Diverging.calls <= 3 else loss * float("inf")
    try:
        batchwise.sweep(plain, torch.optim.SGD(plain.parameters(), lr=0.1), branchy_data(), loss=Diverging(),
                        batch_sizes=[8], repetitions=1, progress=False)
        case("a sweep whose loss diverged raises", False, "sweep returned")
    except batchwise.TrainingError as e:
        case("a sweep whose loss diverged names the optimizer's lr, not the CLI's --lr",
             "lower the optimizer's lr)" in str(e) and "--lr" not in str(e), str(e))
    # Every run out of memory is an answer (nothing fits), not an error: the report, warning as the CLI's does.
    wide = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    x, y = torch.randn(2048, 1, 28, 28), torch.randint(0, 10, (2048,))
    report = batchwise.validate(wide, torch.optim.SGD(wide.parameters(), lr=0.1), (x, y), held_out=(x[:256], y[:256]),
                                batch_sizes=[512, 1024], epochs=0.5, lr_schedule="cosine", memory_budget="5MiB",
                                progress=False)
    case("a validate whose every run ran out of memory warns, as the CLI's",
         [run.outcome for run in report.validation.runs] == ["oom", "oom"] and report.recommendation is None
         and "no run trained: 0 of 2 validation runs ended in an error or a loss that was not finite, 2 ran out of "
             "memory" in " ".join(report.context.warnings), (report.validation.runs, report.context.warnings))

    # An optimizer over frozen parameters alone would change nothing: refused, naming it (before, tune
    # answered batch 1 from trials that trained nothing).
    frozen = Branchy()
    first = next(frozen.parameters())
    first.requires_grad_(False)
    try:
        batchwise.tune(frozen, torch.optim.SGD([first], lr=0.1), branchy_data(), memory_budget="16MiB", max=64,
                       progress=False)
        case("an optimizer over frozen parameters alone is refused", False, "tune returned")
    except ValueError as e:
        case("an optimizer over frozen parameters alone is refused, naming it",
             "the optimizer holds no parameter that requires grad" in str(e), str(e))


class Pairs(torch.utils.data.Dataset):
    """A map-style dataset of (input, label) pairs, as torchvision's are."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def test_tune():
    x, y = branchy_data(4096)
    hx, hy = branchy_data(1024, seed=1)
    torch.manual_seed(0)
    model = Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    lines = []
    jit_calls = []
    saved = {name: getattr(torch.jit, name) for name in ("script", "trace", "load", "save")}
    for name in saved:
        setattr(torch.jit, name, lambda *a, _n=name, **k: jit_calls.append(_n))
    try:
        report = batchwise.tune(model, optimizer, torch.utils.data.DataLoader(Pairs(x, y), batch_size=64),
                                held_out=Pairs(hx, hy), memory_budget="8MiB", max=512, advice_budget=4,
                                progress=lines.append)
    finally:
        for name, f in saved.items():
            setattr(torch.jit, name, f)
    case("TorchScript is never called", not jit_calls, jit_calls)
    rec = report.recommendation
    case("tune recommends a batch with a confidence", rec is not None and rec.batch >= 1 and rec.confidence,
         report.to_json()[:400])
    # Whether the race runs is a measured decision (it needs two batches near the best samples/s, which
    # a loaded machine's sweep may not give): where it ran, it trained on the held-out data given; where
    # not, the recommendation says what it rests on instead.
    raced = report.race is not None
    if raced:
        case("the batch race trained its entries on the held-out data given",
             any(e.rungs > 0 for e in report.race.entries) and "1024" in str(report.race.held_out),
             report.to_json()[:400])
    else:
        print(f"note: no race ran (the sweep left fewer than two fast batches); the pick: {rec.reason}")
        case("without a race the recommendation says what it rests on", bool(rec.reason), report.to_json()[:400])
    case("a learning rate for it, scaled from the optimizer's 0.05", report.lr is not None and report.lr.lr > 0)
    case("the workload: the model, the dataset, SGD", report.workload.model == "Branchy" and
         report.workload.dataset.startswith("Pairs (4096 samples)") and report.workload.optimizer == "sgd",
         json.dumps(report.to_dict()["workload"]))
    case("progress lines as the CLI's: the phases, the trials, the race",
         any(line.startswith("[1/4] fit") for line in lines) and any(line.startswith("[trial ") for line in lines)
         and (not raced or any(line.startswith("[race rung") for line in lines)), lines[:5])
    data = json.loads(report.to_json())
    case("the JSON is the CLI's schema", data.get("schema_version") and {"context", "fit", "sweep"} <= set(data) and
         ("race" in data) == raced)
    with tempfile.TemporaryDirectory() as work:
        page = report.html(os.path.join(work, "tune.html"))
        text = open(page, encoding="utf-8").read()
        case("html(path) writes the report's page", "<html" in text and "Branchy" in text)
        os.chmod(page, 0o640)  # written again whole, it keeps its mode (open(path, "w") had emptied it first)
        report.html(page)
        case("html(path) again keeps the file's mode", os.stat(page).st_mode & 0o777 == 0o640 and
             open(page, encoding="utf-8").read() == text, oct(os.stat(page).st_mode))
        fifo = os.path.join(work, "page.pipe")  # a FIFO is written into, never replaced by a file of its name
        os.mkfifo(fifo)
        into_fifo = []
        # a reader of its own thread (the page is past the pipe's 64 KiB: written while it reads, which a write that
        # held the GIL had deadlocked); daemon, so a write that never comes leaves no process hanging
        reader = threading.Thread(target=lambda: into_fifo.append(open(fifo, encoding="utf-8").read()), daemon=True)
        reader.start()
        for _ in range(2000):
            try:
                report.html(fifo)
                break
            except batchwise.ConfigError:  # until the reader has it open
                time.sleep(0.005)
        reader.join(timeout=60)
        case("html(path) into a FIFO writes into it, and it stays a FIFO",
             into_fifo == [text] and len(text) > 65536 and stat.S_ISFIFO(os.stat(fifo).st_mode),
             (len(text), oct(os.stat(fifo).st_mode)))
        try:
            report.html(os.path.join(work, "gone", "tune.html"))
            case("html(path) into a folder that is not there raises", False)
        except batchwise.ConfigError as e:
            case("html(path) into a folder that is not there raises ConfigError naming it",
                 "Report.html(" in str(e) and "cannot write there" in str(e), str(e))
    case("str(report) is the console table", "recommend" in str(report) and "Branchy" in str(report))
    summary = report.summary()
    case("report.summary() is the short view: the answer in a few lines", "answer: batch "
         f"{report.recommendation.batch}" in summary and len(summary.splitlines()) < len(str(report).splitlines()),
         summary)
    case("the report's texts name this call's options, not the CLI's flags",
         not any(flag + " " in text or flag + ":" in text for flag in ("--max", "--advice-budget", "--memory-budget")
                 for text in (summary, str(report))), summary + str(report))
    from batchwise import _inprocess
    named = _inprocess._as_options("tune", "a larger --advice-budget trains longer; the --max 512; drop --threads; "
                                           "`batchwise noise --noise-steps 80`; too high (lower --lr), --lr-schedule")
    case("a flag that is an option of the call is named as one, --lr as the optimizer's; another stays, and a quoted "
         "command this API has is its call",
         named == "a larger advice_budget trains longer; the max=512; drop --threads; "
                  "`batchwise.noise(model, optimizer, data, noise_steps=80)`; too high (lower the optimizer's lr), "
                  "lr_schedule", named)
    named = _inprocess._as_options("tune", "not trained in full; --validate trains the candidates' full runs to check it")
    case("tune's --validate is batchwise.validate here (Python's tune has none)",
         named == "not trained in full; batchwise.validate(...) trains the candidates' full runs to check it",
         named)
    try:
        report.recommendation.batchh
        case("a misspelt field is an AttributeError", False, "it gave a value")
    except AttributeError as e:
        case("a misspelt field is an AttributeError naming the field", "did you mean batch" in str(e), str(e))
    case("a record that did not run is None", report.validation is None and report.run_race is None)


def test_epochs():
    x, y = branchy_data(4096)
    torch.manual_seed(0)
    model = Branchy()
    lines = []
    report = batchwise.tune(model, torch.optim.AdamW(model.parameters(), lr=1e-3), (x, y),
                            held_out=branchy_data(1024, seed=1), memory_budget="8MiB", max=512, epochs=3,
                            lr_schedule="cosine", progress=lines.append)
    rec = report.recommendation
    # A compressed run reports how far it has come once a second; the callback gets its first line,
    # then one a 10 s, as a log does (the CLI rewrites its live line in place). These runs are shorter
    # than a second: one line each.
    if report.run_race is not None:
        case("the callback hears of the compressed runs",
             any(line.startswith("run race: batch ") for line in lines), lines)
    # Whether a race runs is a measured decision (see test_tune): where the sweep left two fast
    # batches, the run race answers for the run and no batch race runs.
    # The compressed runs' lengths follow the sweep's samples/s; on a loaded machine they can be too
    # short to leave the plateau at the start, and the batch race then answers, with low confidence.
    if (report.run_race is not None and report.run_race.best_batch is None and report.race is not None
            and report.race.stuck):
        print(f"note: neither race's runs left the start ({report.run_race.notes}; {report.race.notes})")
        case("after two races stuck on the plateau the answer is the plateau's, with low confidence",
             rec.confidence == "low" and "the plateau's answer" in rec.reason
             and any(e.batch == rec.batch for e in report.race.entries), rec)
        case("its sentence names the check for the 3-epoch run, as a Python call",
             "`batchwise.validate(model, optimizer, data, epochs=3, batch_sizes=" in rec.reason, rec.reason)
    elif report.run_race is not None and report.run_race.best_batch is None and report.race is not None:
        print(f"note: the run race's compressed runs did not leave the start ({report.run_race.notes}); "
              f"the batch race answered")
        case("after a run race stuck on the plateau the batch race answers with low confidence",
             rec.batch == report.race.best_batch and rec.confidence == "low"
             and "never left the plateau" in rec.confidence_reason, rec)
        case("its sentence says it does not answer for the 3-epoch run",
             "not for your 3-epoch run" in rec.reason and "`validate --epochs 3`" in rec.reason, rec.reason)
    elif report.run_race is not None:
        case("tune with epochs and a cosine rate answers for the run (the run race)",
             report.race is None and rec.batch >= 1, rec)
        case("its sentence speaks of the 3-epoch run", "3-epoch run" in rec.reason, rec.reason)
    else:
        print(f"note: no run race ran (the sweep left fewer than two fast batches: "
              f"{[(p.batch, round(p.samples_per_s)) for p in report.sweep.points]}); the pick: {rec.reason}")
        case("without a run race the recommendation says what it rests on",
             report.race is None and rec.batch >= 1 and bool(rec.reason), rec)
    case("the advised rate for AdamW", report.lr is not None and report.lr.lr > 0)


INTERRUPTED = """
import copy, os, signal, sys, torch
sys.path.insert(0, {here!r})
import inprocess_test as T, batchwise
model = T.Branchy()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
if {where!r} == "backward":  # Ctrl-C in Python inside backward, in the fit's second trial
    model = T.WithBackward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    backwards = [0]
    def interrupting(gradient):
        backwards[0] += 1
        if backwards[0] == 5:
            # What Python's Ctrl-C handler does once it runs (a real signal's handler runs at the
            # main thread's next check, which may fall after backward: then call_python took it)
            signal.default_int_handler(signal.SIGINT, None)
    T.InBackward.hook = interrupting
x, y = T.branchy_data(64)
torch.nn.functional.cross_entropy(model(x), y).backward()
optimizer.step()  # momentum buffers, which a restore must put back too
if {where!r} in ("step", "sigterm"):  # in the middle of a trial, once its steps have changed the momentum buffers
    # SIGTERM's handler raises SystemExit, as a job scheduler's preemption asks a script to end
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(3))
    steps, step = [0], optimizer.step
    def interrupting(*args, **kwargs):
        out = step(*args, **kwargs)
        steps[0] += 1
        if steps[0] == 40:
            os.kill(os.getpid(), signal.SIGINT if {where!r} == "step" else signal.SIGTERM)
        return out
    optimizer.step = interrupting
racing = [False]
def progress(line):
    print(line, flush=True)
    racing[0] = racing[0] or "batch race over" in line  # the race's stage line (the plan's names the race too)
if {where!r} == "race":  # in a race entry's training, after the fit, the sweep and the noise scale
    sent, step = [False], optimizer.step
    def interrupting(*args, **kwargs):
        out = step(*args, **kwargs)
        if racing[0] and not sent[0]:
            sent[0] = True
            os.kill(os.getpid(), signal.SIGINT)
        return out
    optimizer.step = interrupting
before = copy.deepcopy(model.state_dict())
state = copy.deepcopy(optimizer.state_dict())
try:
    batchwise.tune(model, optimizer, T.branchy_data(4096), memory_budget="8MiB", max=512, progress=progress)
    print("returned")
except (KeyboardInterrupt, SystemExit) as e:
    now = optimizer.state_dict()
    print(type(e).__name__ + (f" {{e.code}}" if isinstance(e, SystemExit) else "") + "; restored:",
          all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()))
    print("optimizer restored:", now["param_groups"] == state["param_groups"] and sorted(now["state"]) ==
          sorted(state["state"]) and all(torch.equal(now["state"][k]["momentum_buffer"], v["momentum_buffer"])
                                          for k, v in state["state"].items()))
"""


# A Ctrl-C 5 steps into batch 64's run (batch 32's 64 steps have ended): validate stops there and
# raises batchwise.Interrupted, a KeyboardInterrupt whose report keeps batch 32's run.
VALIDATE_INTERRUPTED = """
import os, signal, sys, torch
sys.path.insert(0, {here!r})
import inprocess_test as T, batchwise
x, y = T.branchy_data(2048)
held_out = T.branchy_data(512, seed=1)
torch.manual_seed(0)
model = T.Branchy()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
before = T.snapshot(model, optimizer)
steps, step = [0], optimizer.step
def interrupting(*args, **kwargs):
    out = step(*args, **kwargs)
    steps[0] += 1
    if steps[0] == 2048 // 32 + 5:
        os.kill(os.getpid(), signal.{signal})
    return out
optimizer.step = interrupting
signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(3))
try:
    batchwise.validate(model, optimizer, (x, y), held_out=held_out, batch_sizes=[32, 64, 128], epochs=1,
                       lr_schedule="cosine", rule_lr=True, progress=False)
    print("returned")
except SystemExit as e:
    del optimizer.step
    print("SystemExit", e.code, "restored:", T.same(before, T.snapshot(model, optimizer)))
except batchwise.Interrupted as e:
    v = e.report.validation
    print("kept:", [r.batch for r in v.runs], "not trained:", v.not_trained, "interrupted:", v.interrupted,
          "final:", v.runs[0].final_accuracy is not None, "recommendation:", e.report.recommendation)
    print("a KeyboardInterrupt:", isinstance(e, KeyboardInterrupt))
    print("message:", e)
    print("warned:", [w for w in e.report.context.warnings if w.startswith("interrupted with 1 of 3 runs ended")])
    print("summary says it:", "interrupted with 1 of 3 runs ended" in e.report.summary())
    del optimizer.step
    print("restored:", T.same(before, T.snapshot(model, optimizer)))
"""


def test_interrupt():
    import signal
    import subprocess
    out = subprocess.run([sys.executable, "-c", VALIDATE_INTERRUPTED.format(here=HERE, signal="SIGINT")],
                         capture_output=True, text=True, timeout=120)
    case("Ctrl-C during validate keeps the runs that ended: batchwise.Interrupted's report",
         "kept: [32] not trained: [64, 128] interrupted: True final: True recommendation: None" in out.stdout,
         out.stdout[-800:] + out.stderr[-800:])
    case("Interrupted is a KeyboardInterrupt, and says what was not trained",
         "a KeyboardInterrupt: True" in out.stdout and
         "message: batchwise.validate: interrupted with 1 of 3 runs ended; 64, 128 were not trained" in out.stdout,
         out.stdout[-800:])
    case("and among its report's warnings, to which its answer line points (they had been empty)",
         "warned: ['interrupted with 1 of 3 runs ended; 64, 128 were not trained, so no batch is recommended (to "
         "finish it: the same call again)']" in out.stdout and "summary says it: True" in out.stdout,
         out.stdout[-800:])
    case("and the model, its optimizer and the RNGs are as they were", "restored: True" in out.stdout,
         out.stdout[-800:])
    out = subprocess.run([sys.executable, "-c", VALIDATE_INTERRUPTED.format(here=HERE, signal="SIGTERM")],
                         capture_output=True, text=True, timeout=120)
    case("a SIGTERM handler's SystemExit during validate is raised again as it was, the model restored",
         "SystemExit 3 restored: True" in out.stdout, out.stdout[-800:] + out.stderr[-800:])
    child = subprocess.Popen([sys.executable, "-c", INTERRUPTED.format(here=HERE, where="none")],
                             stdout=subprocess.PIPE, text=True)
    first = child.stdout.readline()  # the first progress line: the engine is running
    child.send_signal(signal.SIGINT)
    rest, _ = child.communicate(timeout=120)
    case("Ctrl-C during tune raises KeyboardInterrupt, the model restored",
         bool(first) and "KeyboardInterrupt; restored: True" in rest, first + rest[-500:])
    case("and the optimizer's state (its momentum buffers, its groups' rates)", "optimizer restored: True" in rest,
         rest[-500:])
    # In a trial's 40th step, after its steps made momentum buffers of their own: they go, and the
    # user's come back (before, the modes' restore was refused after Ctrl-C, and the optimizer's too).
    # "race": a Ctrl-C in the race's training; every later phase had run on, each of its Python calls failing at
    # once, and the run plan divided by a race entry's unset batch (SIGFPE)
    for where in ("step", "backward", "race"):  # before, Ctrl-C in backward was a trial's error and the call went on
        out = subprocess.run([sys.executable, "-c", INTERRUPTED.format(here=HERE, where=where)], capture_output=True,
                             text=True, timeout=120).stdout
        case(f"Ctrl-C within a trial's {where}: KeyboardInterrupt, the model and the optimizer restored",
             "KeyboardInterrupt; restored: True" in out and "optimizer restored: True" in out, out[-500:])
    # A SIGTERM handler's SystemExit within a trial stops the call as Ctrl-C does and is raised again
    # as it was, its exit code kept (before, it was the optimizer's error: a TrainingError)
    out = subprocess.run([sys.executable, "-c", INTERRUPTED.format(here=HERE, where="sigterm")], capture_output=True,
                         text=True, timeout=120)
    case("SIGTERM's SystemExit within a trial: raised again with its code, the model and the optimizer restored",
         "SystemExit 3; restored: True" in out.stdout and "optimizer restored: True" in out.stdout,
         out.stdout[-500:] + out.stderr[-800:])


def test_options():
    model = Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    checks = [
        (lambda: batchwise.fit(model, optimizer, branchy_data(), memory_budjet="1GiB"), TypeError,
         "unknown option memory_budjet='1GiB'; did you mean memory_budget"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), memory_budget="lots"), ValueError, "memory_budget"),
        (lambda: batchwise.sweep(model, optimizer, branchy_data()), TypeError, "pass batch_sizes=[16, 32, 64]"),
        (lambda: batchwise.fit(model, "sgd", branchy_data()), TypeError, "pass a torch.optim optimizer"),
        (lambda: batchwise.fit(model, optimizer, [1, 2, 3]), TypeError, "pass (inputs, targets) tensors"),
        (lambda: batchwise.fit(model, torch.optim.SGD(Branchy().parameters(), lr=0.1), branchy_data()), ValueError,
         "make it over model.parameters()"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), mode="fast", progress=False), ValueError, "fast"),
        # The CLI's bounds and a strict type, before anything runs: nothing bad becomes a default.
        (lambda: batchwise.fit(model, optimizer, branchy_data(), memory_budget=-5), ValueError,
         "batchwise.fit: memory_budget=-5: must be a number of bytes from 1 to 2**62"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), max=2 ** 40), ValueError,
         "batchwise.fit: max=1099511627776: must be at most 1073741824"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), seed=-1), ValueError,
         "batchwise.fit: seed=-1: must be at least 0"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), max=2.7), TypeError,
         "batchwise.fit: max=2.7 is not a whole number"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), advice_budget=0), ValueError,
         "batchwise.tune: advice_budget=0: must be above 0"),
        # A rate of 0 in every group (a warm-up scheduler's start): refused before the trials, naming the lr
        (lambda: batchwise.tune(model, torch.optim.SGD(model.parameters(), lr=0.0), branchy_data(), progress=False),
         ValueError, "batchwise.tune: the optimizer's lr is 0 in every param group (and no scheduler on it starts "
         "from a rate above 0)"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), epochs=0), ValueError,
         "batchwise.tune: epochs=0: must be above 0"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), lr_schedule="cosine"), ValueError,
         "lr_schedule='cosine': a decaying rate decays over a run of known length; give epochs=N"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), no_race="false"), TypeError,
         "batchwise.tune: no_race='false' is not a bool (True or False)"),
        (lambda: batchwise.sweep(model, optimizer, branchy_data(), batch_sizes=[16, 0]), ValueError,
         "batchwise.sweep: batch size 0 in batch_sizes: must be at least 1"),
        # A misspelt name, with the nearest, before what the call lacks; a tensor is not printed.
        (lambda: batchwise.sweep(model, optimizer, branchy_data(), batch_size=[8, 16]), TypeError,
         "unknown option batch_size=[8, 16]; did you mean batch_sizes"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), epoch=2), TypeError, "did you mean epochs"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), held_out=branchy_data()), TypeError,
         "unknown option held_out=<tuple>"),
        # as the CLI's noise and validate have no --warmup (it had been taken, and unused)
        (lambda: batchwise.noise(model, optimizer, branchy_data(), warmup=2), TypeError, "unknown option warmup=2"),
        # nor a trial's timeout: they run no trials (it had been taken, and unused)
        (lambda: batchwise.validate(model, optimizer, branchy_data(), batch_sizes=[8], epochs=1, trial_timeout=5),
         TypeError, "unknown option trial_timeout=5"),
        (lambda: batchwise.noise(model, optimizer, branchy_data(), no_monitor=True), TypeError,
         "unknown option no_monitor=True"),
        # Data that is not (inputs, targets), named as the data, with what to pass.
        (lambda: batchwise.fit(model, optimizer, dict(zip("xy", branchy_data()))), TypeError,
         "data: a dict (keys 'x', 'y'); pass (inputs, targets) tensors"),
        (lambda: batchwise.fit(model, optimizer, (*branchy_data(), branchy_data()[1])), TypeError,
         "data: a tuple of 3 arrays; pass two, (inputs, targets)"),
        (lambda: batchwise.fit(model, optimizer, ([[0.0] * 48] * 8, [1] * 7)), ValueError,
         "data: 8 inputs and 7 targets; they must be as many"),
        (lambda: batchwise.fit(model, optimizer, ([[0.0] * 48] * 2, [1] * 2)), TypeError,  # two samples, each two long
         "(a pair of two-item lists is read as a dataset of two samples; pass (inputs, targets) as tensors)"),
        (lambda: batchwise.fit(model, optimizer, (list(torch.randn(2, 64, 48)), torch.zeros(64, dtype=torch.long))),
         TypeError, "data: the inputs are a list of 2 tensors beside 64 samples, where batchwise feeds the model one "
         "input tensor; stack them"),  # two inputs, not two samples
        (lambda: batchwise.fit(model, optimizer, (list(torch.randn(2, 64, 48).numpy()), torch.zeros(64).long())),
         TypeError, "data: the inputs are a list of 2 arrays beside 64 samples"),  # NumPy's: "2 inputs and 64 targets"
        (lambda: batchwise.fit(model, optimizer, (torch.randn(64, 48), list(torch.zeros(63, dtype=torch.long)))),
         ValueError, "data: 64 inputs and 63 targets"),  # too few targets, not several of them
        (lambda: batchwise.fit(model, optimizer, [(torch.zeros(48), 1, 0.5), (torch.zeros(48), 0, 0.5)]), TypeError,
         "each sample of the list must be an (input, target) pair, not a tuple"),  # samples of three, not two lists
        (lambda: batchwise.fit(model, optimizer, ([torch.zeros(48), torch.zeros(47), torch.zeros(48)], [0, 1, 2])),
         TypeError, "data: the inputs are a list that is no tensor (stack expects each tensor to be equal size"),
        (lambda: batchwise.fit(torch.nn.Linear(48, 10, device="meta"), lambda p: torch.optim.SGD(p, lr=0.1),
                               branchy_data()), ValueError, "Linear's parameters are on the meta device"),
        (lambda: batchwise.fit(model, optimizer, branchy_data(), device="gpu"), ValueError,
         "device='gpu' is not a device"),
        # before: "move the model with model.to('meta')", a device that cannot train
        (lambda: batchwise.fit(model, optimizer, branchy_data(), device="meta"), ValueError,
         "device='meta': batchwise trains on 'cpu' or 'cuda'"),
        (lambda: batchwise.fit(model, optimizer, (torch.tensor(1.0), torch.tensor(0))), ValueError,
         "data: the inputs are a 0-d tensor (one number)"),  # before: TypeError: len() of a 0-d tensor
        # the forward's "Expected more than 1 value per channel" (Branchy has BatchNorm1d) with the fix
        (lambda: batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), branchy_data(), batch_sizes=[1, 4]),
         batchwise.TrainingError, "BatchNorm cannot train on one value per channel (a batch of 1): start batch_sizes"),
        # What the CLI refuses, refused here too, before anything trains: data that is not finite where the loss on
        # it is not (it had trained, then blamed the rate), two targets, a target beside epochs, a race's budget
        # without a race.
        (lambda: batchwise.fit(model, optimizer, (branchy_data()[0].index_fill(0, torch.tensor([5]), float("nan")),
                                                  branchy_data()[1])), ValueError,
         "data: 1 of its 2048 samples hold inputs that are not finite numbers (NaN or infinity) in the model's type "
         "(float32), the first sample 5, and the loss on them is not finite"),
        (lambda: batchwise.validate(model, optimizer, branchy_data(), batch_sizes=[8], epochs=1,
                                    held_out=(branchy_data(64)[0] / 0, branchy_data(64)[1])), ValueError,
         "held_out: 64 of its 64 samples hold inputs that are not finite"),
        (lambda: batchwise.validate(model, optimizer, branchy_data(), batch_sizes=[8], target_accuracy=0.5,
                                    target_loss=0.5, held_out=branchy_data(64)), batchwise.ConfigError,
         "batchwise.validate: target_accuracy=0.5 and target_loss=0.5: one target at a time"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), target_accuracy=0.5, target_loss=0.5),
         batchwise.ConfigError, "batchwise.tune: target_accuracy=0.5 and target_loss=0.5: one target at a time"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), epochs=1, target_accuracy=0.5),
         batchwise.ConfigError, "batchwise.tune: epochs=1 and target_accuracy=0.5: epochs trains full runs"),
        (lambda: batchwise.tune(model, optimizer, branchy_data(), no_race=True, advice_budget=5),
         batchwise.ConfigError, "batchwise.tune: no_race=True and advice_budget=5: the advice budget is the race's "
         "time, and no_race=True runs none"),
        (lambda: batchwise.tune(torch.nn.Linear(48, 1), lambda p: torch.optim.SGD(p, lr=0.1),
                                (branchy_data()[0], branchy_data()[1].float().unsqueeze(1)), target_accuracy=0.5),
         batchwise.ConfigError, "target_accuracy=0.5: the targets are floating-point values, not class labels"),
        (lambda: batchwise.validate(torch.nn.Linear(48, 1), lambda p: torch.optim.SGD(p, lr=0.1),
                                    (branchy_data()[0], branchy_data()[1].float().unsqueeze(1)), batch_sizes=[8],
                                    held_out=(branchy_data(64)[0], branchy_data(64)[1].float().unsqueeze(1)),
                                    target_accuracy=0.5, progress=False),
         batchwise.ConfigError,
         "batchwise.validate: target_accuracy: the held-out targets are floating-point values, not class labels"),
    ]
    refused(checks)
    # Options refused whatever the data are refused before any of it is read (a whole Dataset had been read first)
    read = [0]

    class Counting(torch.utils.data.Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            read[0] += 1
            return branchy_data(1, seed=i)[0][0], branchy_data(1, seed=i)[1][0]
    try:
        batchwise.tune(model, optimizer, Counting(), epochs=2, target_accuracy=0.5, progress=False)
    except batchwise.ConfigError:
        pass
    case("a refusal of the options reads no sample", read[0] == 0, read[0])
    case("the engine's errors are batchwise's, by class", issubclass(batchwise.ConfigError, ValueError) and
         issubclass(batchwise.DataError, ValueError) and issubclass(batchwise.ModelError, RuntimeError) and
         issubclass(batchwise.DeviceError, RuntimeError))
    # Values a masked loss skips (NaN marks a missing label) are the user's to train on: not refused.
    x, y = branchy_data(512)
    gaps = torch.randn(512, 3).masked_fill(torch.rand(512, 3, generator=torch.Generator().manual_seed(1)) < 0.1,
                                           float("nan"))
    masked = batchwise.fit(torch.nn.Linear(48, 3), lambda p: torch.optim.SGD(p, lr=0.05), (x, gaps), max=32,
                           loss=lambda o, t: ((o - t.nan_to_num()) ** 2)[~t.isnan()].mean(), progress=False)
    case("targets a masked loss skips train", masked.fit.batch == 32, masked.fit)
    text = batchwise._inprocess._as_options("tune", "measure it (`batchwise noise --batch 128 --noise-steps 64`)")
    case("a CLI command in a Python text is its call", "`batchwise.noise(model, optimizer, data, batch=128, "
         "noise_steps=64)`" in text, text)
    # NumPy arrays are (inputs, targets) too, and a DataLoader's own collate_fn is used over a
    # TensorDataset (it pads each input to 50 features here: the model's width).
    x, y = branchy_data(256)
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x.numpy(), y.numpy()), max=64,
                           progress=False)
    case("NumPy arrays train as tensors", report.fit.batch is not None, report.workload.dataset)
    # Labels as a Python list beside the tensor are read as torch.as_tensor reads them (the pair had been taken for a
    # dataset of two samples, whose collation failed); a list that is no numbers says which part it is
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y.tolist()), max=64, progress=False)
    case("labels as a Python list train", report.fit.batch == 64 and report.workload.num_classes == int(y.max()) + 1,
         (report.fit.batch, report.workload.dataset))
    # Both as lists (x.tolist(), y.tolist()), and the inputs as a list of tensors (list(x)): the same data
    import numpy
    for name, pair in [("inputs and labels as lists", (x.tolist(), y.tolist())), ("a list of input tensors", (list(x), y)),
                       ("labels as NumPy and Python numbers", (x.tolist(), [numpy.int64(v) for v in y[:8].tolist()] +
                                                               y[8:].tolist()))]:
        report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), pair, max=64, progress=False)
        case(f"{name} train", report.fit.batch == 64 and report.workload.dataset == f"tensors {list(x.shape)}",
             (report.fit.batch, report.workload.dataset))
    try:
        batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, ["a"] * len(x)), max=64, progress=False)
        case("labels as a list of words are refused", False, "fit returned")
    except TypeError as e:
        case("labels as a list of words are refused, naming the targets",
             str(e).startswith("batchwise.fit: data: the targets are a list that is no tensor"), e)
    import numpy
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x.double().numpy(), y.numpy()),
                           max=numpy.int64(64), target=numpy.float32(0.9), no_monitor=numpy.True_, progress=False)
    case("float64 arrays train a float32 model; NumPy scalars are options", report.fit.batch is not None,
         report.workload.dataset)
    # floating data takes the model's type: float64 arrays and float32 tensors train a .double() model, and a
    # float64 TensorDataset a float32 one (each had failed in the forward: "mat1 and mat2 must have the same dtype")
    for name, model, data in [("float64 arrays, a float64 model", Branchy().double(), (x.double().numpy(), y.numpy())),
                              ("float32 tensors, a float64 model", Branchy().double(), (x, y)),
                              ("a float64 TensorDataset, a float32 model", Branchy(),
                               torch.utils.data.TensorDataset(x.double(), y)),
                              # labels as a column, [N, 1]: cross-entropy had refused "multi-target"
                              ("labels of [N, 1]", Branchy(), (x, y.unsqueeze(1)))]:
        report = batchwise.sweep(model, lambda p: torch.optim.SGD(p, lr=0.1), data, batch_sizes=[16], steps=2,
                                 repetitions=1, progress=False)
        case(f"{name} trains", [p.outcome for p in report.sweep.points] == ["ok"], report.sweep.points)
    if hasattr(torch.optim, "Adafactor"):  # its eps is a pair: the run plan's settings read 0 there
        report = batchwise.tune(Branchy(), lambda p: torch.optim.Adafactor(p, lr=0.01), (x, y), max=64,
                                no_race=True, no_noise=True, progress=False)
        case("any torch.optim optimizer trains (Adafactor)", report.recommendation is not None, report)
    pad = lambda batch: (torch.nn.functional.pad(torch.stack([s[0] for s in batch]), (0, 2)),  # noqa: E731
                         torch.stack([s[1] for s in batch]))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, collate_fn=pad)
    report = batchwise.fit(Branchy(features=50), lambda p: torch.optim.SGD(p, lr=0.1), loader, max=64,
                           progress=False)
    case("a loader's collate_fn is used over a TensorDataset", report.workload.input_shape == [50],
         report.workload.input_shape)
    # The default loss of value targets compares a [N, 1] output with [N] targets value by value
    # (mse_loss would broadcast them to [N, N], with only a warning), and refuses outputs of another size.
    import warnings
    values = x[:, 0] * 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = batchwise.fit(torch.nn.Linear(48, 1), lambda p: torch.optim.SGD(p, lr=0.05), (x, values), max=64,
                               progress=False)
    case("one output a sample beside [N] targets: no broadcast", report.fit.batch is not None and not any(
        "broadcast" in str(w.message) for w in caught), [str(w.message) for w in caught])
    refused([(lambda: batchwise.fit(torch.nn.Linear(48, 3), lambda p: torch.optim.SGD(p, lr=0.05), (x, values)),
              batchwise.TrainingError, "the model gives [32, 3] for targets of [32]: mean squared error needs as many")])
    # A loader's sampler draws the samples it trains on: a split of one dataset by two index lists
    # trains on its own part, not the whole set (the held-out part included, as before).
    pairs = Pairs(x, y)
    part = torch.utils.data.DataLoader(pairs, batch_size=8,
                                       sampler=torch.utils.data.SubsetRandomSampler(list(range(100))))
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), part, max=64, progress=False)
    case("a SubsetRandomSampler's split is what trains", report.workload.dataset_size == 100 and
         "as its loader samples them" in report.workload.dataset, (report.workload.dataset_size,
                                                                   report.workload.dataset))
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                           torch.utils.data.DataLoader(pairs, batch_size=8, shuffle=True), max=64, progress=False)
    case("a shuffling loader trains on every sample", report.workload.dataset_size == len(x),
         report.workload.dataset_size)
    tensors = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8,
                                          sampler=torch.utils.data.SubsetRandomSampler(list(range(50))))
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), tensors, max=64, progress=False)
    case("a TensorDataset's split too", report.workload.dataset_size == 50, report.workload.dataset_size)
    # the same split through batch_sampler=BatchSampler(...), whose loader.sampler is the default
    # sequential one; the sampler's own generator is put back, so the user's next epoch is the same
    g = torch.Generator().manual_seed(11)
    split = torch.utils.data.BatchSampler(torch.utils.data.SubsetRandomSampler(list(range(70)), generator=g), 8, False)
    state = g.get_state()
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                           torch.utils.data.DataLoader(pairs, batch_sampler=split), max=64, progress=False)
    case("a BatchSampler's sampler says the split too", report.workload.dataset_size == 70,
         report.workload.dataset_size)
    case("and its generator is as it was", torch.equal(state, g.get_state()))
    # a batch sampler of the user's own with its own generator, an epoch count and NumPy's generator: each as it was
    # (its generator had been left advanced, where only an inner sampler's torch generator was kept)
    class Bucketing(torch.utils.data.BatchSampler):
        def __init__(self, n, size):
            super().__init__(torch.utils.data.SequentialSampler(range(n)), size, False)
            self.generator, self.epoch = torch.Generator().manual_seed(3), 0
            self.rng = numpy.random.default_rng(5)

        def __iter__(self):
            self.epoch += 1
            order = torch.randperm(len(self.sampler), generator=self.generator).tolist()
            self.rng.random()
            for i in range(0, len(order), self.batch_size):
                yield order[i:i + self.batch_size]
    import numpy
    own = Bucketing(70, 8)
    before = (own.generator.get_state(), own.epoch, copy.deepcopy(own.rng.bit_generator.state))
    batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), torch.utils.data.DataLoader(pairs, batch_sampler=own),
                  max=64, progress=False)
    # a buffer registered as None that the forward fills from its batch is None again after the call
    class Lazy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Branchy()
            self.register_buffer("centre", None)

        def forward(self, x):
            if self.training and self.centre is None:
                self.centre = x.mean(0).detach()
            return self.body(x - (self.centre if self.centre is not None else 0))
    lazy = Lazy()
    keys = list(lazy.state_dict())
    batchwise.fit(lazy, lambda p: torch.optim.SGD(p, lr=0.1), pairs, max=32, progress=False)
    case("a buffer registered as None and filled by the forward is None again", lazy.centre is None
         and list(lazy.state_dict()) == keys, list(lazy.state_dict()))
    case("a batch sampler's own generator, epoch count and NumPy generator are as they were",
         torch.equal(before[0], own.generator.get_state()) and before[1] == own.epoch
         and before[2] == own.rng.bit_generator.state, (own.epoch, own.rng.bit_generator.state))
    # a collate_fn of the user's that gives labels as a list of numbers, or inputs as a list of tensors: one tensor
    for name, collate in (("labels as a list", lambda b: (torch.stack([s[0] for s in b]), [int(s[1]) for s in b])),
                          ("inputs as a list", lambda b: ([s[0] for s in b], torch.tensor([int(s[1]) for s in b])))):
        report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                               torch.utils.data.DataLoader(pairs, batch_size=8, collate_fn=collate), max=32,
                               progress=False)
        case(f"a collate_fn that gives {name} trains", report.fit.batch == 32, report.fit.batch)
    # held-out labels coded as floats beside integer training labels: named, with the fix
    refused([(lambda: batchwise.validate(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y),
                                         held_out=(x[:50], y[:50].float()), batch_sizes=[16], epochs=0.1),
              TypeError, "held_out: its targets are whole numbers in a floating type, where the training data's are "
                         "class labels (integers); pass them as integers too (y.long())")])
    # a loader of batch_size=None over a dataset of pairs (its collate_fn default_convert, which batches nothing)
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                           torch.utils.data.DataLoader(pairs, batch_size=None), max=32, progress=False)
    case("a loader of batch_size=None trains on its dataset's pairs", report.fit.batch == 32, report.fit.batch)
    class Batches(torch.utils.data.Dataset):  # each item a batch already
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return x[16 * i:16 * i + 16], y[16 * i:16 * i + 16]
    refused([(lambda: batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                                    torch.utils.data.DataLoader(Batches(), batch_size=None), max=32),
              TypeError, "each item of the Batches is a batch of 16 (a loader of batch_size=None)")])
    # a sampler that never ends is read for one epoch of the dataset
    class Endless(torch.utils.data.Sampler):
        def __iter__(self):
            while True:
                yield from range(40)
    report = batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                           torch.utils.data.DataLoader(pairs, batch_size=8, sampler=Endless()), max=64,
                           progress=False)
    case("an endless sampler is read for one epoch", report.workload.dataset_size == len(pairs),
         report.workload.dataset_size)
    # A collate_fn that pads each batch to its longest sample, over more samples than one chunk read
    class Ragged(torch.utils.data.Dataset):
        def __len__(self):
            return 1500

        def __getitem__(self, i):
            return torch.ones(1 + i % 7 if i < 1024 else 1 + i % 3), i % 2
    def padded(batch):
        inputs = torch.nn.utils.rnn.pad_sequence([s[0] for s in batch], batch_first=True)
        return inputs, torch.tensor([s[1] for s in batch])
    report = batchwise.fit(torch.nn.Linear(7, 2), lambda p: torch.optim.SGD(p, lr=0.1),
                           torch.utils.data.DataLoader(Ragged(), collate_fn=padded), max=64, progress=False)
    case("a padding collate_fn over more than 1,024 samples pads them all alike",
         report.workload.input_shape == [7], report.workload.input_shape)
    # The CLI's spellings: a range of batch sizes, the device "auto", a seed left as None
    report = batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y), batch_sizes="8-32*2",
                             repetitions=1, steps=1, warmup=0, device="auto", seed=None, progress=False)
    case("batch_sizes='8-32*2' sweeps 8, 16 and 32; device='auto', seed=None are defaults",
         [p.batch for p in report.sweep.points] == [8, 16, 32], [p.batch for p in report.sweep.points])
    # A batch larger than the training set: measured as asked, warned of, not the answer (as the CLI's sweep)
    report = batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x[:20], y[:20]), batch_sizes=[8, 32],
                             repetitions=1, steps=1, warmup=0, progress=False)
    case("a sweep warns of a batch larger than the training set and answers within it",
         any("batch 32 is larger than the 20 training samples" in w for w in report.context.warnings)
         and report.recommendation.batch == 8, (report.context.warnings, report.recommendation.batch))
    # Within the target of the budget, as the CLI's sweep answers: where none peaked within it, no answer, and why
    report = batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y), batch_sizes=[8, 32],
                             memory_budget="64MiB", target=0.001, repetitions=1, steps=1, warmup=0, progress=False)
    case("a sweep recommends no batch where none peaked within the target, and says so",
         report.recommendation is None
         and any(w.startswith("no batch swept peaks within the 0.1 % target of the 64.0 MiB budget")
                 for w in report.context.warnings), (report.recommendation, report.context.warnings))
    refused([(lambda: batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y), batch_sizes="8-"),
              TypeError, "batch_sizes='8-' is not a list of batch sizes"),
             (lambda: batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y),
                                      batch_sizes="4-64+0"), TypeError, "needs a step of at least 1"),
             # as the CLI's: a budget above the device's memory would not stop a trial (validate too)
             (lambda: batchwise.validate(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y), held_out=(x, y),
                                         batch_sizes=[8], memory_budget="5000GiB", progress=False), ValueError,
              "memory_budget=4.88 TiB: more than the "),
             # as the CLI's noise: a batch larger than the training set would measure its repeats
             (lambda: batchwise.noise(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x[:100], y[:100]), batch=256,
                                      micro_batch=32), ValueError, "batch=256: larger than the 100 training samples")])
    # What users hand it that it cannot take, named with the fix (a hunt, 2026-12-06): samples of two inputs
    # (torch.as_tensor's "only one element tensors can be converted"), a collate_fn that returns a dict (blamed
    # on the dataset's pairs), the loss's class for an instance ("Boolean value of Tensor ... is ambiguous").
    class TwoInputs(Pairs):
        def __getitem__(self, i):
            return (self.x[i], 2 * self.x[i]), int(self.y[i])

    class Listed(Pairs):
        def __getitem__(self, i):
            return self.x[i].tolist(), int(self.y[i])
    class DictOut(Branchy):
        def forward(self, x):
            return {"out": super().forward(x)}
    as_dict = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32,
                                          collate_fn=lambda b: {"x": torch.stack([s[0] for s in b]),
                                                                "y": torch.stack([s[1] for s in b])})
    refused([(lambda: batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), TwoInputs(x, y), progress=False),
              TypeError, "each sample's input is a tuple of 2, where batchwise feeds the model one input tensor"),
             (lambda: batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), as_dict, batch_sizes=[8],
                                      progress=False), TypeError, "gave a dict, not an (inputs, targets) pair"),
             (lambda: batchwise.sweep(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y),
                                      loss=torch.nn.CrossEntropyLoss, batch_sizes=[8], progress=False), TypeError,
              "loss is the class CrossEntropyLoss, not a loss; pass an instance, torch.nn.CrossEntropyLoss()"),
             (lambda: batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), Listed(x, y), progress=False),
              TypeError, "each sample's input is a list of 48 numbers, where batchwise feeds the model one input "
              "tensor; return it as a tensor"),
             # meta tensors hold no values (copying one out had raised torch's NotImplementedError, unnamed)
             (lambda: batchwise.fit(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1),
                                    (torch.empty(64, 48, device="meta"), y[:64]), progress=False), ValueError,
              "batchwise.fit: data: the inputs are on the 'meta' device, which holds shapes and no values"),
             # an output the engine cannot read, in noise's own steps: named by the call, as fit's are
             (lambda: batchwise.noise(DictOut(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y), batch=32,
                                      micro_batch=8, noise_steps=3, progress=False), batchwise.ModelError,
              "batchwise.noise: DictOut.forward's output is a dict of 'out', without 'logits': return the logits")])
    # Accuracy where the targets are labels a sample in a column ([N, 1], the user's own loss) and tokens
    # ([N, T] against an output [N, T, V]): it had read 99.8 for the first (a broadcast), and refused the second.
    column = batchwise.validate(Branchy(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y.unsqueeze(1)),
                                loss=lambda o, t: torch.nn.functional.cross_entropy(o, t.squeeze(1)),
                                held_out=(x[:256], y[:256].unsqueeze(1)), batch_sizes=[32], epochs=1, progress=False)
    accuracy = column.to_dict()["validation"]["runs"][0]["final_accuracy"]
    case("labels in a column score an accuracy, a fraction", accuracy is not None and 0 <= accuracy <= 1, accuracy)

    class Tokens(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.out = torch.nn.Embedding(20, 16), torch.nn.Linear(16, 20)

        def forward(self, t):
            return self.out(self.embed(t))
    tokens = torch.randint(0, 20, (512, 9), generator=torch.Generator().manual_seed(3))
    lm = batchwise.validate(Tokens(), lambda p: torch.optim.AdamW(p, lr=0.01), (tokens[:, :-1], tokens[:, 1:]),
                            loss=lambda o, t: torch.nn.functional.cross_entropy(o.reshape(-1, 20), t.reshape(-1)),
                            held_out=(tokens[:128, :-1], tokens[:128, 1:]), batch_sizes=[32], epochs=1,
                            progress=False)
    accuracy = lm.to_dict()["validation"]["runs"][0]["final_accuracy"]
    case("tokens against an output of a class per token score the tokens right", accuracy is not None and
         0 <= accuracy <= 1, accuracy)
    # A model built in float64 trains in it: the report says so beside the precision (it had read "fp32" alone).
    double = batchwise.sweep(Branchy().double(), lambda p: torch.optim.SGD(p, lr=0.1), (x, y), batch_sizes=[16],
                             repetitions=1, steps=1, warmup=0, progress=False)
    workload = double.to_dict()["workload"]
    case("a float64 model's parameter type is in the report and its table",
         workload.get("parameter_dtype") == "float64" and "fp32, parameters in float64" in double.table(),
         (workload.get("parameter_dtype"), workload.get("precision")))
    # A frozen layer is a parameter that does not train: both counts are in the report and its table (the count had
    # held the frozen ones under a schema that said "trainable").
    part = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    part[0].requires_grad_(False)
    partly = batchwise.sweep(part, lambda p: torch.optim.SGD([q for q in p if q.requires_grad], lr=0.1), (x, y),
                             batch_sizes=[16], repetitions=1, steps=1, warmup=0, progress=False)
    workload = partly.to_dict()["workload"]
    with tempfile.TemporaryDirectory() as folder:
        partly.html(os.path.join(folder, "partly.html"))
        partly_html = open(os.path.join(folder, "partly.html")).read()
    case("a frozen layer's parameters count, and not among the trainable",
         (workload.get("parameter_count"), workload.get("trainable_parameter_count")) == (3786, 650) and
         "3,786 parameters (14.8 KiB), 650 trainable" in partly.table() and
         "<td>parameters</td><td>3,786 (650 trainable)</td>" in partly_html, workload)
    # A single logit (BCE's binary classifier): its argmax is always 0, so no accuracy, the loss alone (it had read
    # the share of label 0).
    one = batchwise.validate(torch.nn.Linear(48, 1), lambda p: torch.optim.SGD(p, lr=0.1), (x, (y > 1).long()),
                             loss=lambda o, t: torch.nn.functional.binary_cross_entropy_with_logits(o.squeeze(1),
                                                                                                   t.float()),
                             held_out=(x[:256], (y[:256] > 1).long()), batch_sizes=[32], epochs=1, progress=False)
    run = one.to_dict()["validation"]["runs"][0]
    case("a single logit has no accuracy, and a loss",
         run.get("final_accuracy") is None and run.get("final_loss") is not None, run)
    # A dataset's random transforms draw from torch's generator as its samples are read: put back too
    class Noisy(Pairs):
        def __getitem__(self, i):
            return self.x[i] + 0.01 * torch.randn(48), int(self.y[i])
    torch.manual_seed(5)
    model = Branchy()  # its initial weights draw from the generator, before the state is taken
    state = torch.get_rng_state()
    batchwise.fit(model, lambda p: torch.optim.SGD(p, lr=0.1), Noisy(x, y), max=16, progress=False)
    case("the generator is as it was after a dataset with random transforms", torch.equal(state, torch.get_rng_state()))


def test_lightning():
    try:
        import lightning.pytorch as L
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(SKIP)
    import batchwise.lightning

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Branchy()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 10)]

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            return torch.utils.data.DataLoader(Pairs(*branchy_data(4096)), batch_size=32)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(Pairs(*branchy_data(1024, seed=1)), batch_size=32)

    torch.manual_seed(0)
    module = Lit()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    report = batchwise.lightning.fit(module, Data(), memory_budget="4MiB", mode="binsearch", max=1024, progress=False)
    case("fit finds a batch through training_step", report.fit.outcome == "fits" and report.fit.batch,
         report.to_json()[:300])
    case("the report names the module and its training_step",
         report.workload.model == "Lit" and report.workload.loss == "Lit.training_step", report.workload.loss)
    report = batchwise.lightning.tune(module, Data(), memory_budget="4MiB", max=256, advice_budget=2, no_noise=True,
                                      progress=False)
    # Whether the race runs is a measured decision, as in the tune case above: a loaded machine's
    # sweep may leave fewer than two fast batches (seen: 128 at 63,000 samples/s, 64 at 21,000 and
    # 256 at 43,000 under two busy cores). Where it ran, it raced on the val_dataloader's data.
    rec = report.recommendation
    case("tune recommends a batch through training_step", rec is not None and rec.batch >= 1,
         f"warnings: {report.context.warnings}")
    if report.race is not None:
        case("the race trained on the val_dataloader's data",
             any(e.rungs > 0 for e in report.race.entries) and "1024" in str(report.race.held_out),
             str(report.race.held_out))
    else:
        print(f"note: no race ran (the sweep left fewer than two fast batches: "
              f"{[(p.batch, round(p.samples_per_s)) for p in report.sweep.points]}); the pick: {rec.reason}")
        case("without a race the recommendation says what it rests on", bool(rec.reason), rec)
    report = batchwise.lightning.validate(module, Data(), batch_sizes=[64], epochs=1, lr_schedule="cosine",
                                          progress=False)
    run = report.validation.runs[0]
    case("validate trains a full run through training_step, judged on the val_dataloader's data",
         run.batch == 64 and run.final_accuracy is not None and "1024" in report.validation.held_out,
         report.to_json()[:400])
    case("the module is bit-identical afterwards",
         all(torch.equal(v, module.state_dict()[k]) for k, v in before.items()))

    # A module whose training_step calls its network directly, without a forward: its runs are
    # judged on the held-out loss alone (the evaluation had taken a class dimension its stand-in
    # output lacks, and ended in an IndexError named as the held-out data's)
    class NoForward(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Branchy()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    report = batchwise.lightning.validate(NoForward(), Data(), batch_sizes=[64], epochs=1, lr_schedule="cosine",
                                          progress=False)
    run = report.validation.runs[0]
    case("a module without forward is validated on its held-out loss",
         run.final_loss is not None and run.final_accuracy is None, report.to_json()[:400])

    # A scheduler made in configure_optimizers that steps at once (OneCycleLR) had lowered the rate the
    # race and the advice started from (25x); a training_step without batch_idx, and the DataLoader as
    # trainer.fit's second argument, train; what cannot run is refused by name.
    class OneCycle(NoForward):
        def training_step(self, batch):
            x, y = batch
            return {"loss": torch.nn.functional.cross_entropy(self.net(x), y)}

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=100)}

    loader = torch.utils.data.DataLoader(Pairs(*branchy_data(1024)), batch_size=32)
    report = batchwise.lightning.sweep(OneCycle(), loader, batch_sizes=[32], steps=2, repetitions=1, progress=False)
    case("the module's own rate, not its scheduler's first step's; training_step(batch); a DataLoader as the data",
         report.workload.lr == 0.1 and [p.outcome for p in report.sweep.points] == ["ok"],
         (report.workload.lr, report.sweep.points))

    class Kept(NoForward):  # an optimizer the module keeps: its rate is put back as configure_optimizers left it
        def __init__(self):
            super().__init__()
            self.opt = torch.optim.SGD(self.parameters(), lr=0.1)

        def configure_optimizers(self):
            return {"optimizer": self.opt, "lr_scheduler": torch.optim.lr_scheduler.LinearLR(self.opt, 0.01)}

    kept = Kept()
    report = batchwise.lightning.sweep(kept, loader, batch_sizes=[32], steps=2, repetitions=1, progress=False)
    case("a kept optimizer's rate is the module's for the call and as its scheduler left it after",
         report.workload.lr == 0.1 and abs(kept.opt.param_groups[0]["lr"] - 0.001) < 1e-12,
         (report.workload.lr, kept.opt.param_groups[0]["lr"]))

    class Manual(NoForward):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

    class TwoOptimizers(NoForward):
        def configure_optimizers(self):
            return [torch.optim.SGD(self.net.parameters(), lr=0.1), torch.optim.Adam(self.parameters())]

    class NeedsTrainer(NoForward):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)]

    class BrokenVal(Data):
        def val_dataloader(self):
            raise NameError("name 'vaa' is not defined")

    class NoLoss(NoForward):
        def training_step(self, batch, batch_idx):
            return {"logits": self.net(batch[0])}

    class TrainOnly(L.LightningDataModule):  # no val_dataloader: validate names the hook it would read
        def train_dataloader(self):
            return torch.utils.data.DataLoader(Pairs(*branchy_data(256)), batch_size=32)

    sweep = lambda module, data=None: batchwise.lightning.sweep(module, data, batch_sizes=[32], steps=1,  # noqa: E731
                                                                repetitions=1, progress=False)
    refused([
        (lambda: sweep(Manual(), Data()), TypeError, "Manual uses manual optimization (automatic_optimization = False)"),
        (lambda: sweep(TwoOptimizers(), Data()), TypeError, "configure_optimizers() gave 2 optimizers"),
        (lambda: sweep(NeedsTrainer(), Data()), TypeError, "NeedsTrainer.configure_optimizers() raised RuntimeError"),
        (lambda: sweep(NoForward()), TypeError, "NoForward defines no train_dataloader(); define it, or pass"),
        (lambda: sweep(Branchy(), Data()), TypeError, "Branchy is a torch.nn.Module, not a LightningModule"),
        (lambda: batchwise.lightning.tune(NoForward(), BrokenVal(), max=64, progress=False), NameError, "vaa"),
        (lambda: batchwise.lightning.validate(NoForward(), TrainOnly(), batch_sizes=[32], epochs=1, progress=False),
         TypeError, "no held_out data; validation judges each run on data it did not train on: pass held_out=(x_test, "
         "y_test), a Dataset or a DataLoader (or define TrainOnly.val_dataloader())"),
        (lambda: sweep(NoLoss(), Data()), batchwise.TrainingError,  # named as this call, not batchwise.sweep
         "batchwise.lightning.sweep: NoLoss.training_step raised TypeError: it returned a dict without 'loss' "
         "(keys 'logits')"),
    ])


def test_validate():
    x, y = branchy_data(2048)
    held_out = branchy_data(1024, seed=1)
    torch.manual_seed(0)
    model = Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    before = snapshot(model, optimizer)
    lines = []
    report = batchwise.validate(model, optimizer, (x, y), held_out=held_out, batch_sizes=[32, 128], epochs=1,
                                lr_schedule="cosine", progress=lines.append)
    v = report.validation
    runs = {r.batch: r for r in v.runs}
    case("validate trains a full run at each batch, with a final accuracy and a time",
         sorted(runs) == [32, 128] and all(r.final_accuracy is not None and 0 <= r.final_accuracy <= 1 and
                                           r.train_s > 0 and abs(r.epochs - 1) < 0.05 for r in runs.values()),
         report.to_json()[:600])
    case("they learnt: a final accuracy above chance (0.1) at each batch",
         all(r.final_accuracy > 0.3 for r in runs.values()), {b: r.final_accuracy for b, r in runs.items()})
    case("judged on the held-out data given", "1024" in str(v.held_out), v.held_out)
    case("the answer is the fastest good batch, with the rate it trained at",
         report.recommendation is not None and report.recommendation.batch == v.fastest_batch and
         v.fastest_batch in v.good_batches and report.lr.lr == runs[v.fastest_batch].lr,
         report.to_json()[:600])
    case("its sentence gives the run and the time", "trained 1 epoch (cosine rate" in report.recommendation.reason,
         report.recommendation.reason)
    case("progress lines as the CLI's", any(line.startswith("[validate 1/2] batch 32") for line in lines), lines[:3])
    after = snapshot(model, optimizer)
    case("the model, optimizer and RNGs are as they were", same(before, after))

    # A batch larger than the training set (not than the run: 2 epochs are 100 samples) repeats samples in its
    # steps: trained as asked, and said, as the CLI's validate says it (before, Python's said nothing).
    small = batchwise.validate(model, optimizer, branchy_data(50), held_out=held_out, batch_sizes=[16, 64], epochs=2,
                               progress=False)
    case("a batch larger than the training set is warned of",
         any(w.startswith("batch 64 is larger than the 50 training samples: each step repeats samples")
             for w in small.context.warnings), small.context.warnings)

    report = batchwise.noise(model, optimizer, (x, y), batch=256, micro_batch=32, noise_steps=10, progress=False)
    case("noise measures the gradient noise scale along training",
         report.noise_scale is not None and report.noise_scale.steps == 10 and
         (report.noise_scale.b_simple or 0) > 0, report.to_json()[:400])
    case("and leaves the model as it was", same(before, snapshot(model, optimizer)))
    # An optimizer over the head alone: the noise scale is its parameters', whether or not the body
    # still computes gradients (they had grown across the steps, unzeroed, and were counted)
    rng = torch.get_rng_state()  # the checks after this one compare the generator too
    torch.manual_seed(3)
    body_trainable = Branchy()
    body_frozen = copy.deepcopy(body_trainable)
    for module in (body_frozen.branches, body_frozen.norm):
        module.requires_grad_(False)
    b = [batchwise.noise(m, torch.optim.SGD(m.head.parameters(), lr=0.05), (x, y), batch=256, micro_batch=32,
                         noise_steps=4, progress=False).noise_scale.b_simple for m in (body_trainable, body_frozen)]
    case("the noise scale is the optimizer's parameters'", b[0] == b[1], b)
    torch.set_rng_state(rng)

    one = torch.nn.Linear(48, 1)
    checks = [
        (lambda: batchwise.validate(model, optimizer, (x, y), batch_sizes=[32], epochs=1), TypeError,
         "no held_out data"),
        (lambda: batchwise.validate(model, optimizer, (x, y.float()), held_out=held_out, batch_sizes=[32]), TypeError,
         "pass target_loss=..., or epochs=N"),
        # class labels to train on, one-hot rows held out: no accuracy to read there (the engine had refused
        # target_accuracy, an option not given)
        (lambda: batchwise.validate(model, optimizer, (x, y), held_out=(held_out[0], torch.nn.functional.one_hot(
            held_out[1], 10).float()), batch_sizes=[32]), TypeError,
         "no target and no epochs; the held-out targets are not class labels"),
        (lambda: batchwise.validate(model, optimizer, (x, y), held_out=held_out, batch_sizes=[32], epochs=1,
                                    target_accuracy=0.9, progress=False), ValueError,
         "epochs=1 and target_accuracy=0.9: epochs trains full runs and compares their final quality"),
        (lambda: batchwise.noise(model, optimizer, (x, y), batch=256, micro_batch=48, progress=False), ValueError,
         "micro_batch=48 must be below batch=256 and divide it"),
        (lambda: batchwise.validate(model, optimizer, (x, y), held_out=held_out, batch_sizes=[32], epochs=1,
                                    batch_schedule=[(32, 0), (64, "soon")]), TypeError, "batch-size schedule"),
        (lambda: batchwise.validate(model, optimizer, (x, y), held_out=held_out, batch_sizes=[32], epochs=1,
                                    batch_schedule=""), TypeError, "batch_schedule='' is not a batch-size schedule"),
        (lambda: batchwise.validate(model, optimizer, (x, y), held_out=held_out, batch_sizes=[32], epochs=1,
                                    max_seconds=60), ValueError,
         # as written: 60 and 1, not 60.0 and 1.0
         "max_seconds=60 limits a run to a target, and epochs=1 trains every run to its end; drop max_seconds"),
        # Held-out data the model or the loss cannot take is refused before anything trains, naming it.
        (lambda: batchwise.validate(model, optimizer, (x, y), held_out=(held_out[0][:, :40], held_out[1]),
                                    batch_sizes=[32], epochs=1, progress=False), batchwise.TrainingError,
         "held_out (tensors [1024, 40]), its first samples evaluated before training, in Branchy.forward raised"),
        # Labels past the output's columns, which cross-entropy reads by label (on CUDA a device-side assert
        # that leaves the GPU unusable to the process): refused by a forward alone, before any loss.
        (lambda: batchwise.tune(model, optimizer, (x, y), held_out=(held_out[0], held_out[1] + 10),
                                epochs=1, progress=False), ValueError,
         "batchwise.tune: held_out (tensors [1024, 48]): its labels run to 19, past the 10 columns of Branchy's "
         "output ([2, 10]), which cross-entropy reads by label; give labels from 0 to 9, or a model with 20 outputs"),
        (lambda: batchwise.fit(model, optimizer, (x, y + 1), progress=False), ValueError,
         "data (tensors [2048, 48]): its labels run to 10, past the 10 columns of Branchy's output ([2, 10]), which "
         "cross-entropy reads by label; give labels from 0 to 9 (labels that start at 1: y - 1), or a model with 11 "
         "outputs"),
        (lambda: batchwise.fit(model, optimizer, (x, y + 1), loss=torch.nn.CrossEntropyLoss(), progress=False),
         ValueError, "past the 10 columns of Branchy's output"),
        # One logit for labels 0 and 1: the binary loss it wants is named
        (lambda: batchwise.fit(one, torch.optim.SGD(one.parameters(), lr=0.1), (x, y % 2), progress=False),
         ValueError, "its labels run to 1, past the 1 column of Linear's output ([2, 1]), which cross-entropy reads "
         "by label; give labels from 0 to 0, or a model with 2 outputs; a model of one output for labels 0 and 1 "
         "trains with loss=torch.nn.BCEWithLogitsLoss() on float targets"),
        # Class labels as floats: mean squared error's refusal says what they look like
        (lambda: batchwise.fit(model, optimizer, (x, y.float()), max=64, progress=False), batchwise.TrainingError,
         "mean squared error needs as many outputs as target values; pass loss=... for another comparison; the "
         "targets are whole numbers in a floating type: class labels? pass them as integers (y.long())"),
        (lambda: batchwise.fit(model, optimizer, (x, y - 1), loss=torch.nn.NLLLoss(), progress=False),
         ValueError, "data (tensors [2048, 48]): its labels run from -1, below the first of the 10 columns of Branchy's output "
         "([2, 10]), which cross-entropy reads by label; give labels from 0 to 9"),
    ]
    before = snapshot(model, optimizer)
    refused(checks)
    case("the probes leave the model and its optimizer as they were", same(before, snapshot(model, optimizer)))
    # A loss of the user's own reads labels its own way: on a CPU, not probed (torch raises where it must).
    report = batchwise.fit(model, optimizer, (x, y + 1), loss=lambda out, t: torch.nn.functional.cross_entropy(
        out, t - 1), max=64, progress=False)
    case("labels a loss of the user's shifts itself are taken", report.fit.batch is not None, report.fit.message)

    # The label a loss skips is no class: 255 beside a 10-way head, skipped by the loss, is taken.
    skipped = y.clone()
    skipped[::7] = 255
    report = batchwise.fit(model, optimizer, (x, skipped), loss=torch.nn.CrossEntropyLoss(ignore_index=255), max=64,
                           progress=False)
    case("the label the loss skips (ignore_index) is not refused", report.fit.batch is not None, report.fit.message)

    # The training data's probe is two samples: a model that needs more (min=4) is left to its trials;
    # a forward that counts its calls in a buffer, in any mode, has the count put back.
    class NeedsFour(Branchy):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))

        def forward(self, x):
            self.calls += 1
            if len(x) < 4:
                raise ValueError("at least 4 samples")
            return super().forward(x)
    with torch.random.fork_rng():  # the model's initialisation draws nothing the final check compares
        four = NeedsFour()
    four_optimizer = torch.optim.SGD(four.parameters(), lr=0.1)
    four_before = snapshot(four, four_optimizer)
    report = batchwise.fit(four, four_optimizer, (x, y), min=4, max=64, progress=False)
    case("a model that needs more samples than the probe's two still fits", report.fit.batch == 64,
         report.fit.message)
    case("and its buffer and the rest are as they were", same(four_before, snapshot(four, four_optimizer)))
    # Held-out data of another kind than the training data's, which the loss takes: one-hot rows
    # beside class labels are judged on the loss.
    one_hot = (held_out[0], torch.nn.functional.one_hot(held_out[1], 10).float())
    report = batchwise.validate(model, optimizer, (x, y), held_out=one_hot, batch_sizes=[64], epochs=1, progress=False)
    case("one-hot held-out rows beside class labels are evaluated, on the loss",
         report.validation.runs[0].final_loss is not None and report.validation.runs[0].final_accuracy is None,
         report.to_json()[:400])
    case("and the model is as it was", same(before, snapshot(model, optimizer)))
    # Labels the loss skips (cross-entropy's ignore_index, -100) count in no accuracy, as in no loss: an accuracy
    # over every row had been capped at the labelled share (half here), and a target above it never reached
    unlabelled = y.clone()
    unlabelled[::2] = -100
    report = batchwise.validate(model, optimizer, (x, unlabelled), held_out=(x, unlabelled), batch_sizes=[64],
                                epochs=1, progress=False)
    modes = [m.training for m in model.modules()]
    model.eval()  # as the engine evaluates
    with torch.no_grad():
        right = (model(x).argmax(1) == unlabelled)[unlabelled != -100].float().mean().item()
    for m, mode in zip(model.modules(), modes):
        m.training = mode
    case("an ignore_index label counts in no accuracy", report.validation.accuracy_before is not None and
         abs(report.validation.accuracy_before - right) < 1e-6, (report.validation.accuracy_before, right))


TESTS = {"fit": test_fit, "state": test_state, "oom": test_oom, "error": test_error, "tune": test_tune,
         "options": test_options, "lightning": test_lightning, "epochs": test_epochs,
         "interrupt": test_interrupt, "validate": test_validate}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in TESTS:
        print(f"usage: {sys.argv[0]} {'|'.join(TESTS)}")
        sys.exit(2)
    TESTS[sys.argv[1]]()
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)
