import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from shutil import which

import pytest

from apertus.core.manifest import find_step_manifests

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Nothing in the tests may reach the network.
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
# The session runs several processes of torch at once on the machine's cores (the default run,
# the rehearsal's jobs, tests of several ranks). OpenMP's threads, by default, spin while they
# wait for each other, burning the core the other one needs: three 2-thread trainings at once
# on 2 cores took 3x the CPU and wall time they take with waiting threads that sleep
# (bench/RESULTS.md). Set before torch is loaded here; every process the tests start inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# A session started with SIGINT ignored (a background job of a shell without job control, as a
# CI script may start it) would pass that on to every process the tests start, and the tests
# that press Ctrl-C would see it ignored: Python's own handler again, which exec resets.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (a dead child not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def flip_bit_in_place(path: Path, offset: int, bit: int = 2) -> None:
    """Flip one bit of a file without changing its size or times, as bit rot leaves it: what
    no stat-based check can see."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc). torchrun starts each worker in a session of
    its own, so killing the launcher's process group would leave the workers training."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def run_tool(*args, cwd=REPO, check=False, **kwargs):
    """Run a tool from this environment's bin/ (snakemake, snakefmt, ruff...), capturing output."""
    cmd = [str(BIN / args[0]), *map(str, args[1:])]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def repo():
    return REPO


CLUSTER_SCRIPT = REPO / "profiles" / "slurm-local" / "cluster.sh"
# Written next to the default run: each step manifest's SLURM job id right after the run.
SLURM_JOBS = "default-run-slurm-jobs.json"


def slurm_installable() -> str | None:
    """Why the local SLURM cluster cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the local SLURM cluster's daemons run as root"
    missing = [tool for tool in ("slurmctld", "slurmd", "munged", "sbatch") if not which(tool)]
    if missing:
        return f"{', '.join(missing)} not installed (bash {CLUSTER_SCRIPT} install)"
    return None


def _cluster_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), *args], capture_output=True, text=True, timeout=180
    )


@contextlib.contextmanager
def local_cluster(nodes: int):
    """The local SLURM cluster with `nodes` nodes (`cluster.sh start N`) for the block; a
    cluster running before (the session's one-node cluster of `slurm_cluster`) is stopped first
    and started again after, with its own number of nodes. Skips where it cannot run, except
    in CI, where that fails."""
    why_not = slurm_installable()
    if why_not:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the SLURM tests, but {why_not}")
        pytest.skip(why_not)
    before = None
    if _cluster_script("status").returncode == 0:
        listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True)
        before = str(len(set(listed.stdout.split())))
        _cluster_script("stop")
    started = _cluster_script("start", str(nodes))
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield
    finally:
        _cluster_script("stop")
        if before is not None:
            again = _cluster_script("start", before)
            assert again.returncode == 0, again.stdout + again.stderr


class BackgroundRun:
    """A whole Snakemake run in a thread of its own, started when the session starts so that it
    overlaps the tests that do not read it (the default run, the 8B rehearsal); `wait` gives
    its run directory to the tests that do. Its log is `results`/snakemake.log."""

    def __init__(self, name, results, run, command, timeout, env=None):
        self.name, self.results, self.run, self.command = name, results, run, command
        self.timeout, self.env = timeout, env
        self.log = results / "snakemake.log"
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stopping = False
        self._error: BaseException | None = None

    def prepare(self) -> None:
        """What the run needs first (its inputs)."""

    def around(self):
        """A context the run runs in (its cluster)."""
        return contextlib.nullcontext()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    @property
    def ended(self) -> bool:
        """Started and no longer running (passed or failed)."""
        return self._thread is not None and not self._thread.is_alive()

    def reached(self, steps: tuple[str, ...]) -> bool:
        """Whether the run has written all of `steps` (paths in its run directory: step
        manifests, each written when its step has ended)."""
        return all((self.results / self.run / step).exists() for step in steps)

    def wait_for(self, steps: tuple[str, ...]) -> Path:
        """The run directory once `steps` are there (`reached`), while the run goes on; fails as
        `wait` does if the run ends without them."""
        if self._thread is None:
            self.start()
        while self._thread.is_alive() and not self.reached(steps):
            self._thread.join(timeout=1)
        if not self.reached(steps):
            self.wait()
            pytest.fail(f"the {self.name} passed but wrote not all of {', '.join(steps)}")
        return self.results / self.run

    def wait(self) -> Path:
        """The run directory once the whole pipeline ran (started now if it was not); fails
        with the tail of Snakemake's log if it did not."""
        if self._thread is None:
            self.start()
        while self._thread.is_alive():  # a join without a timeout would not see Ctrl-C
            self._thread.join(timeout=1)
        if self._error is not None:
            raise self._error
        if self._proc.returncode != 0:
            tail = self.log.read_text(errors="replace")[-8000:]
            pytest.fail(f"the {self.name} failed ({self._proc.returncode}), {self.log}:\n{tail}")
        return self.results / self.run

    def stop(self) -> None:
        """A run still going is interrupted (`interrupt`); the thread then leaves `around`."""
        with self._lock:
            self._stopping = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            interrupt(proc)
        if self._thread is not None:
            self._thread.join(timeout=300)

    def _run(self) -> None:
        try:
            self.prepare()
            if self._stopping:  # the session ended meanwhile: nothing more to start
                return
            with self.around(), open(self.log, "w") as log:
                with self._lock:
                    if self._stopping:
                        raise RuntimeError(f"the session ended before the {self.name} started")
                    self._proc = subprocess.Popen(
                        self.command, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT
                    )
                try:
                    self._proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired as late:
                    interrupt(self._proc)
                    raise RuntimeError(
                        f"the {self.name} ran past {self.timeout} s ({self.log})"
                    ) from late
        except BaseException as error:  # pytest's skip and fail too: wait() raises them
            self._error = error


def interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C to Snakemake (it stops its jobs, a SLURM run cancels them), SIGKILL if it has not
    ended in a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# The steps of the workflow's local rules (summaries, the merge of QRPO's scored shards, report,
# release folder), relative to a run directory: they run beside Snakemake, not in SLURM.
LOCAL_RULE_STEPS = re.compile(
    r"^(data/robots/|data/funnel|evaluate/table|posttrain/reward|posttrain/qrpo_scored\.|"
    r"report/|release)"
)


def assert_slurm_jobs_but_local_rules(
    jobs: dict[str, str | None], prefix: str = "", grouped: re.Pattern | None = None
) -> None:
    """`jobs` (each step manifest under a run, `prefix` + its path in the run -> its SLURM job
    id): the local rules' steps ran beside Snakemake, every other step as a job of its own, but
    the steps `grouped` matches, which share jobs (Snakemake's job groups) with each other only."""
    local = {step for step, job in jobs.items() if job is None}
    assert local and all(
        step.startswith(prefix) and LOCAL_RULE_STEPS.search(step.removeprefix(prefix))
        for step in local
    ), local
    shared, alone = set(), []
    for step, job in jobs.items():
        if grouped and grouped.search(step):
            shared.add(job)
        elif job is not None:
            alone.append(job)
    assert len(set(alone)) == len(alone)  # one job per other step
    assert not shared & set(alone)


def default_run_executor() -> str:
    """Where the default run's jobs run: `local` (2 cores), or with APERTUS_TEST_EXECUTOR=slurm
    the one-node local cluster through Snakemake's SLURM executor. The 8B rehearsal
    (tests/rehearsal) runs the whole pipeline through the two-node cluster."""
    chosen = os.environ.get("APERTUS_TEST_EXECUTOR")
    if chosen not in (None, "slurm", "local"):
        raise pytest.UsageError(f"APERTUS_TEST_EXECUTOR={chosen!r}: use slurm or local")
    return chosen or "local"


@pytest.fixture(scope="session")
def slurm_cluster():
    """A one-node SLURM cluster on this machine (profiles/slurm-local/cluster.sh), started for
    the session and stopped after it (unless it was running before). Skips where it cannot
    run, except in CI (`CI` set), where that fails."""
    why_not = slurm_installable()
    if why_not:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the SLURM tests, but {why_not}")
        pytest.skip(why_not)
    was_running = subprocess.run(["bash", CLUSTER_SCRIPT, "status"], capture_output=True)
    if was_running.returncode != 0:
        subprocess.run(["bash", CLUSTER_SCRIPT, "start"], check=True, timeout=120)
    yield
    if was_running.returncode != 0:
        subprocess.run(["bash", CLUSTER_SCRIPT, "stop"], check=False, timeout=120)


# Fixtures of a part of the default run, each with the steps whose manifests its tests wait
# for: the whole data stage (the funnel comes after every filter, dedup and the selection; the
# probes stand alone), and tokenization with phase 1 and phase 2 (phase 2 comes after every
# tokenization step but the held-out set). Their tests start while the rest of the run goes on.
DEFAULT_RUN_PARTS = {
    "default_run_data": ("data/funnel.manifest.json", "data/probes.manifest.json"),
    "default_run_phase2": ("pretrain/phase2.manifest.json", "tokenize/heldout.manifest.json"),
}


def _parts_read(item) -> list[str]:
    """The parts of the default run (`DEFAULT_RUN_PARTS`) that `item` reads, in their order."""
    return [part for part in DEFAULT_RUN_PARTS if part in item.fixturenames]


def _reads_rehearsal(item) -> bool:
    return "rehearsal" in item.fixturenames


def _reads_default_run(item) -> bool:
    return "default_run" in item.fixturenames or bool(_parts_read(item))


def _place(item) -> int:
    """0: a test that reads neither background run; 1: one that reads the default run (or a
    part of it); 2: the rehearsal's; 3: the other tests on a SLURM cluster."""
    if item.get_closest_marker("slurm") is None:
        return 1 if _reads_default_run(item) else 0
    return 2 if _reads_rehearsal(item) else 3


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The order when nothing runs in the background (`_place`): the tests that read neither
    run, then those of the default run, the rehearsal's, and the other tests on a SLURM cluster
    last, since no other test may stop or share the rehearsal's two-node cluster. With the runs
    in the background, `pytest_runtestloop` takes a later test as soon as what it reads is
    there. Among the default run's, those of a part of it (`DEFAULT_RUN_PARTS`) first, in the
    order the run makes them. Where a background run is selected, some of the tests that read
    neither run go to a second stream (`SecondStream`)."""
    parts = list(DEFAULT_RUN_PARTS)
    items.sort(
        key=lambda item: (_place(item), min([*map(parts.index, _parts_read(item)), len(parts)]))
    )
    second = second_stream_items(items)
    if second and not config.option.collectonly:
        chosen = set(second)
        items[:] = [item for item in items if item not in chosen]
        # Deselected here (the terminal's count and progress are this process's tests).
        config.hook.pytest_deselected(items=second)
        yielding = any(map(_reads_rehearsal, items)) and default_run_executor() == "local"
        SECOND_STREAM.start(config, second, yielding=yielding)


# Where the session holds the background runs, the tests that read neither run would be one
# stream of tests beside them, which, once the runs have ended, keeps only about one of 2 cores
# busy: a CI run of a5ab1a8 ran ~45% busy for its last 15 minutes (bench/RESULTS.md).
# Those in these folders run in a second pytest process from the start instead, beside the
# runs and the rest of the tests (more than half of them: that stream should end with the
# SLURM tests, the last of this one, which mostly wait on requeues); its report is printed at
# the end of this session's, and a failure there fails this session. APERTUS_TEST_STREAMS=1
# keeps every test in this process, 2 makes the second stream without a background run.
SECOND_STREAM_FOLDERS = ("tests/data/", "tests/evaluate/", "tests/export/", "tests/model/",
                         "tests/posttrain/", "tests/tokenize/", "tests/train/",
                         "tests/workflow/")  # fmt: skip
SECOND_STREAM_ENV = "APERTUS_TEST_STREAM"  # "second" in the second stream's process


def second_stream_items(items) -> list:
    """The tests of `items` for the second stream: none in the second stream itself, or with
    APERTUS_TEST_STREAMS=1, or unless a background run is selected (a whole session's tests, not
    a few chosen by hand) or APERTUS_TEST_STREAMS=2; else those in `SECOND_STREAM_FOLDERS` that
    read neither run and use no SLURM cluster (`_place` 0)."""
    streams = os.environ.get("APERTUS_TEST_STREAMS")
    if streams not in (None, "1", "2"):
        raise pytest.UsageError(f"APERTUS_TEST_STREAMS={streams!r}: use 1 or 2")
    if os.environ.get(SECOND_STREAM_ENV) or streams == "1":
        return []
    background = any(_reads_default_run(item) or _reads_rehearsal(item) for item in items)
    if not background and streams != "2":
        return []
    return [
        item
        for item in items
        if _place(item) == 0 and item.nodeid.startswith(SECOND_STREAM_FOLDERS)
    ]


class SecondStream:
    """The second pytest process of a session (`second_stream_items`): started on the tests it
    was given (their node ids in an argument file), at the tests' CPU priority, its output in a
    log of its own; `finish` waits for it and reports it in this session."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.log: Path | None = None
        self.count = 0

    def start(self, config, items, yielding: bool) -> None:
        """`yielding`: the tests yield the CPU to the runs (`TESTS_NICE`, as `_tests_yield`)."""
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="apertus-second-stream-"))
        ids = scratch / "tests.txt"
        ids.write_text("".join(f"{item.nodeid}\n" for item in items))
        self.log, self.count = scratch / "pytest.log", len(items)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"@{ids}"]
        if config.option.durations is not None:
            command.append(f"--durations={config.option.durations}")
        if config.option.maxfail:
            command.append(f"--maxfail={config.option.maxfail}")
        command += ["-v"] * max(config.option.verbose, 0)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=config.rootpath,
                env={**os.environ, SECOND_STREAM_ENV: "second"},
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=(lambda: _nice_to(TESTS_NICE)) if yielding else None,
            )
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"second stream: {len(items)} tests in another process ({self.log})"
            )

    def finish(self, session) -> None:
        """Waits for the second stream and writes its report; a failure there (or its end by a
        signal) counts as a failed test of this session."""
        if self.proc is None:
            return
        self.proc.wait()  # Ctrl-C interrupts it (then `stop`)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write("\n")
            reporter.write_sep("=", f"second stream ({self.count} tests, {self.log})")
            reporter.write(self.log.read_text(errors="replace"))
        if self.proc.returncode != 0:
            session.testsfailed += 1

    def stop(self) -> None:
        """An interrupted session: the second stream is interrupted too."""
        if self.proc is not None and self.proc.poll() is None:
            interrupt(self.proc)


SECOND_STREAM = SecondStream()


# The background runs of this session, by name ("default run", "rehearsal"): `_in_background`.
BACKGROUND: dict[str, "BackgroundRun"] = {}


def _ready(item, place: int, pending: dict[int, list]) -> bool:
    """Whether `item` (at `place`) can run now without waiting: the background runs it reads
    have ended, and a test on a SLURM cluster comes after the rehearsal and its tests (the
    two-node cluster is the rehearsal's alone while it runs)."""
    if place == 3 and pending[2]:
        return False
    if place >= 2 and not _ended("rehearsal"):
        return False
    if "default_run" in item.fixturenames:
        return _ended("default run")
    run = BACKGROUND.get("default run")
    return all(
        run is not None and (run.ended or run.reached(DEFAULT_RUN_PARTS[part]))
        for part in _parts_read(item)
    )


def _ended(name: str) -> bool:
    return name in BACKGROUND and BACKGROUND[name].ended


def _next_item(pending: dict[int, list]):
    """The next test to run, from the tests not run yet by `_place` (each list in the collection's
    order): the first of those that waited for a background run and need not wait any more;
    else the first that reads neither run; else the first in `_place` order (which then waits).
    The tests that read neither run fill the time the runs take. A call looks at the few tests
    of the runs only: over all tests it took 63 ms, 145 s of a session's CPU."""
    for place in (1, 2, 3):
        for item in pending[place]:
            if _ready(item, place, pending):
                return item
    return next((items[0] for _, items in sorted(pending.items()) if items), None)


# APERTUS_TEST_CPU=<file>: each test's CPU seconds (this process's and those of the processes
# it started and waited for, from getrusage) written to <file> as JSON at the session's end,
# most first (the second stream's to <file>.second). A CI run's CPU is its budget on 2 cores:
# this says which tests spend it, where --durations says only how long each waited.
CPU_FILE_ENV = "APERTUS_TEST_CPU"
_CPU_SPENT: dict[str, float] = {}


def _cpu_seconds() -> float:
    import resource

    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get(CPU_FILE_ENV):
        yield
        return
    before = _cpu_seconds()
    yield
    _CPU_SPENT[item.nodeid] = round(_cpu_seconds() - before, 2)


def pytest_sessionfinish(session):
    target = os.environ.get(CPU_FILE_ENV)
    if target and _CPU_SPENT:
        if os.environ.get(SECOND_STREAM_ENV):
            target += ".second"
        ranked = dict(sorted(_CPU_SPENT.items(), key=lambda kv: -kv[1]))
        Path(target).write_text(json.dumps(ranked, indent=1) + "\n")


def pytest_runtestloop(session):
    """pytest's own loop (`_pytest.main.pytest_runtestloop`), but the next test is chosen when
    the one before starts (`_next_item`), so that a test reading a background run starts as soon
    as the run has ended, not after every test that reads neither."""
    if session.config.option.collectonly:
        return None  # pytest's own loop
    pending: dict[int, list] = {0: [], 1: [], 2: [], 3: []}
    for item in session.items:
        pending[_place(item)].append(item)
    try:
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} errors during collection")
        item = _next_item(pending)
        while item is not None:
            pending[_place(item)].remove(item)
            nextitem = _next_item(pending)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
            item = nextitem
        SECOND_STREAM.finish(session)
    finally:
        SECOND_STREAM.stop()
    return True


# The CPU priorities (nice) of the session's streams where the rehearsal runs: the rehearsal
# (R) 0, the default run (D) `DEFAULT_RUN_NICE`, the tests `TESTS_NICE`. R's chain of SLURM jobs
# waits on the scheduler between its steps and keeps only about half of 2 cores busy alone; at
# the priority of everything else each of its steps also waits for a share of the cores (it
# took 46 min of a CI run's 54; 29 alone). The tests that read D or R can only start once they
# have ended, one at a time, with the SLURM tests after R: the earlier both end, the more of the
# tests that read neither run are left to fill the cores beside them (two streams of them:
# `SecondStream`). So R first, then D, and the tests take what is left. On Linux a thread's
# nice is its own: R's thread (and the cluster's daemons and jobs it starts) keeps 0, D's
# thread is started at `DEFAULT_RUN_NICE`, and the session's thread goes on at `TESTS_NICE`.
DEFAULT_RUN_NICE = 2
TESTS_NICE = 6


def _nice_to(level: int) -> None:
    """This thread, and what it starts from now on, at nice `level` (never back up)."""
    with contextlib.suppress(OSError):
        current = os.nice(0)
        if level > current:
            os.nice(level - current)


def _in_background(run: BackgroundRun, then=None):
    """A session fixture's body: `run` started now where the default run uses the local
    executor (else when its first test waits for it), then `then()`; stopped at the session's
    end if still running."""
    if default_run_executor() == "local":
        run.start()
        if then is not None:
            then()
    BACKGROUND[run.name] = run
    try:
        yield run
    finally:
        run.stop()
        del BACKGROUND[run.name]


@pytest.fixture(scope="session", autouse=True)
def rehearsal_run(request, tmp_path_factory):
    """The 8B rehearsal's run (tests/rehearsal/background.py) when its tests are selected:
    started at once in the background, unless the default run uses the local cluster
    (APERTUS_TEST_EXECUTOR=slurm; the rehearsal then starts when its tests do). Stopped at the
    session's end if still running."""
    if not any(map(_reads_rehearsal, request.session.items)):
        yield None
        return
    from tests.rehearsal.background import Rehearsal

    run = Rehearsal(tmp_path_factory.mktemp("rehearsal"))
    yield from _in_background(run, then=lambda: _nice_to(DEFAULT_RUN_NICE))


def _default_run_command(results: Path) -> list[str]:
    if default_run_executor() == "slurm":
        where = ["--workflow-profile", "profiles/slurm-local"]
    else:
        where = ["--cores", "2"]
    return [str(BIN / "snakemake"), *where, "--config", f"results_dir={results}", "run=e2e"]


@pytest.fixture(scope="session", autouse=True)
def default_run_started(request, tmp_path_factory, rehearsal_run):
    """The default run (`default_run`) when tests that read it are selected: on the local
    executor, started at once in the background, beside the tests that do not read it (they run
    first: `pytest_collection_modifyitems`); through the one-node cluster
    (APERTUS_TEST_EXECUTOR=slurm), when the first test that reads it starts. Stopped at the
    session's end if still running."""
    if not any(_reads_default_run(item) for item in request.session.items):
        yield None
        return
    results = tmp_path_factory.mktemp("results")
    run = BackgroundRun("default run", results, "e2e", _default_run_command(results), 3600)
    yield from _in_background(run)


@pytest.fixture(scope="session", autouse=True)
def _tests_yield(rehearsal_run, default_run_started):
    """Once the background runs have started (on the local executor), the tests at
    `TESTS_NICE` where the rehearsal is one of them."""
    if rehearsal_run is not None and default_run_executor() == "local":
        _nice_to(TESTS_NICE)


@pytest.fixture(scope="session")
def default_run(request, default_run_started):
    """The whole default pipeline, run once per test session into a scratch results directory;
    tests of each stage read its outputs. Returns the run dir. Its jobs run on the local
    executor on 2 cores, or through the local SLURM cluster (`default_run_executor`)."""
    if default_run_executor() == "slurm":
        request.getfixturevalue("slurm_cluster")
    run_dir = default_run_started.wait()
    results = run_dir.parent
    # Where each step ran, before later tests re-run some steps locally (tests/slurm).
    jobs = {
        str(path.relative_to(results)): json.loads(path.read_text())["slurm_job_id"]
        for path in find_step_manifests(run_dir)
    }
    (results / SLURM_JOBS).write_text(json.dumps(jobs, indent=1))
    return run_dir


def _default_run_part(request, part: str) -> Path:
    if default_run_executor() == "slurm":
        return request.getfixturevalue("default_run")
    return request.getfixturevalue("default_run_started").wait_for(DEFAULT_RUN_PARTS[part])


@pytest.fixture(scope="session")
def default_run_data(request):
    """The default run's directory once its data stage is done (`DEFAULT_RUN_PARTS`)."""
    return _default_run_part(request, "default_run_data")


@pytest.fixture(scope="session")
def default_run_phase2(request):
    """The default run's directory once its data, tokenization, phase 1 and phase 2 are done
    (`DEFAULT_RUN_PARTS`)."""
    return _default_run_part(request, "default_run_phase2")


def copy_upstream(default_run: Path, run_dir: Path, pretrain: tuple[str, ...] = ()) -> None:
    """The default run's data and tokenization stages, and the `pretrain` stages with their
    manifests and final checkpoints, copied into `run_dir`: a test then runs only what follows
    them."""
    for stage in ("data", "tokenize"):
        shutil.copytree(default_run / stage, run_dir / stage, symlinks=True)
    for name in pretrain:
        shutil.copytree(default_run / "pretrain" / name, run_dir / "pretrain" / name)
        manifest = f"{name}.manifest.json"
        shutil.copy2(default_run / "pretrain" / manifest, run_dir / "pretrain" / manifest)
        # run.json names its final checkpoint relative to itself (in pretrain/_work).
        recorded = json.loads((default_run / "pretrain" / name / "run.json").read_text())
        checkpoint = recorded["final_checkpoint"]
        if not os.path.isabs(checkpoint):
            shutil.copytree(
                os.path.normpath(default_run / "pretrain" / name / checkpoint),
                os.path.normpath(run_dir / "pretrain" / name / checkpoint),
            )


def planned_jobs(run_dir, tmp_path, override_yaml: str) -> dict[str, int]:
    """Jobs (rule -> count) a dry-run of `run_dir` would execute with `override_yaml` merged
    over the config: what a change would re-run."""
    override = tmp_path / "override.yaml"
    override.write_text(override_yaml)
    proc = run_tool(
        "snakemake",
        "-n",
        "--cores",
        "2",
        "--configfile",
        override,
        "--config",
        f"results_dir={run_dir.parent}",
        f"run={run_dir.name}",
        check=True,
    )
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, flags=re.M))
    return {rule: int(n) for rule, n in counts.items() if rule not in ("all", "total")}
