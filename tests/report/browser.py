"""A minimal headless-browser harness for tests: Chromium driven through the Chrome DevTools
Protocol (CDP) over `--remote-debugging-pipe`, standard library only.

With that flag Chromium reads commands from its fd 3 and writes replies and events to its fd 4,
each message one JSON object followed by a NUL byte; no websocket is involved. Every read waits
with a deadline, so a hung or crashed browser fails the test instead of hanging it.

    with Browser() as browser:
        page = browser.open(tmp_path / "report.html")
        page.wait_for("document.querySelector('img')?.complete")
        assert page.evaluate("document.querySelector('img').naturalWidth") > 0
        assert page.console_errors == []
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

# Chromium's fds for the DevTools pipe: it reads commands from 3 and writes to 4.
_CHILD_READ_FD, _CHILD_WRITE_FD = 3, 4


class BrowserError(RuntimeError):
    """The browser failed: it could not start, it died, or it answered a command with an error."""


class JavaScriptError(BrowserError):
    """An evaluated expression threw (or its promise was rejected)."""


def find_chromium() -> str | None:
    """The first Chromium-like browser on PATH, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    """The browser to test with; where there is none, skips the test, except in CI (`CI` set),
    where that fails (like the SLURM cluster fixture in tests/conftest.py)."""
    import pytest

    found = find_chromium()
    if found is None:
        why = (
            f"no {', '.join(CHROMIUM_NAMES)} on PATH "
            "(as root, `bash workflow/quickstart.sh test` installs Debian's chromium)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the browser tests, but {why}")
        pytest.skip(why)
    return found


def _flags(profile: Path, viewport: tuple[int, int]) -> list[str]:
    width, height = viewport
    return [
        "--headless=new",
        "--no-sandbox",  # tests run as root, where the sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--mute-audio",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
    ]


class _Connection:
    """The two pipe ends on our side, with request ids and event dispatch."""

    def __init__(self, write_fd: int, read_fd: int, describe_death: Callable[[], str]):
        self._write_fd = write_fd
        self._read_fd = read_fd
        self._describe_death = describe_death
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already known to hold no NUL
        self._next_id = 0
        self.handlers: dict[str | None, Callable[[str, dict], None]] = {}

    def close(self) -> None:
        for fd in (self._write_fd, self._read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def send(self, method: str, params: dict | None = None, session_id: str | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        data = memoryview(json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([], [self._write_fd], [], remaining)[1]:
                raise TimeoutError(f"the browser does not read its DevTools pipe ({method})")
            try:
                data = data[os.write(self._write_fd, data) :]
            except BrokenPipeError as e:
                raise BrowserError(
                    f"the browser is gone ({method}); {self._describe_death()}"
                ) from e
        return self._next_id

    def call(
        self,
        method: str,
        params: dict | None = None,
        session_id: str | None = None,
        timeout: float = 30,
    ) -> dict:
        """Send a command and return its result, dispatching the events that come first."""
        request_id = self.send(method, params, session_id)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message is None:
                raise TimeoutError(f"no reply to {method} from the browser within {timeout:g} s")
            if self._dispatch(message):
                continue
            if message.get("id") == request_id:
                if "error" in message:
                    error = message["error"]
                    detail = f"{error.get('message')} {error.get('data', '')}".strip()
                    raise BrowserError(f"{method} failed: {detail}")
                return message.get("result", {})
            # Any other reply is a late one to a command that timed out: dropped.

    def wait_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Dispatch events until `done()` holds; TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not done():
            message = self._read(deadline)
            if message is None:
                raise TimeoutError(f"the browser took more than {timeout:g} s {what}")
            self._dispatch(message)

    def pump(self) -> None:
        """Dispatch the events already waiting in the pipe, without blocking."""
        while (message := self._read(time.monotonic())) is not None:
            self._dispatch(message)

    def _read(self, deadline: float) -> dict | None:
        """The next message, or None if none is complete by the deadline."""
        while (end := self._buffer.find(b"\0", self._scanned)) < 0:
            self._scanned = len(self._buffer)
            remaining = max(0.0, deadline - time.monotonic())
            if not select.select([self._read_fd], [], [], remaining)[0]:
                return None
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                raise BrowserError(
                    f"the browser closed its DevTools pipe; {self._describe_death()}"
                )
            self._buffer += chunk
        message = json.loads(self._buffer[:end])
        del self._buffer[: end + 1]
        self._scanned = 0
        return message

    def _dispatch(self, message: dict) -> bool:
        """Hand an event to its session's handler; False for a reply."""
        if "id" in message:
            return False
        handler = self.handlers.get(message.get("sessionId"))
        if handler:
            handler(message.get("method", ""), message.get("params", {}))
        return True


def _remote_value(remote: dict) -> Any:
    """The Python value of a CDP RemoteObject returned by value."""
    if "value" in remote:
        return remote["value"]
    special = remote.get("unserializableValue")
    if special is None:
        return None  # undefined
    if special.endswith("n"):
        return int(special[:-1])  # BigInt
    return float(special)  # NaN, Infinity, -Infinity, -0


def _exception_text(details: dict) -> str:
    exception = details.get("exception") or {}
    text = exception.get("description") or str(exception.get("value", "")) or details.get("text")
    where = details.get("url") or ""
    if where and "lineNumber" in details:
        where = f" ({where}:{details['lineNumber'] + 1})"
    elif where:
        where = f" ({where})"
    return f"{text}{where}"


def _short(expression: str, limit: int = 200) -> str:
    return expression if len(expression) <= limit else expression[:limit] + "..."


class Page:
    """One browser tab, attached through its own flat CDP session."""

    def __init__(self, browser: Browser, target_id: str, session_id: str):
        self._browser = browser
        self._connection = browser._connection
        self.target_id = target_id
        self.session_id = session_id
        self._console_errors: list[str] = []
        self._loaded: set[str] = set()  # loader ids whose document fired `load`
        self._gone: str | None = None
        self._connection.handlers[session_id] = self._on_event

    def _on_event(self, method: str, params: dict) -> None:
        if method == "Runtime.exceptionThrown":
            self._console_errors.append(_exception_text(params.get("exceptionDetails", {})))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args", [])
            text = " ".join(str(a.get("value", a.get("description", a.get("type")))) for a in args)
            self._console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Page.lifecycleEvent" and params.get("name") == "load":
            self._loaded.add(params.get("loaderId", ""))
        elif method == "Inspector.targetCrashed":
            self._gone = "the page crashed"
        elif method == "Inspector.detached":
            self._gone = f"the page was detached ({params.get('reason')})"

    def _call(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        if self._browser._connection is None:
            raise BrowserError(f"{method}: the browser is closed")
        if self._gone:
            raise BrowserError(f"{method}: {self._gone}")
        return self._connection.call(method, params, self.session_id, timeout)

    @property
    def console_errors(self) -> list[str]:
        """Uncaught exceptions and console.error/console.assert messages so far, as text."""
        self._connection.pump()
        return list(self._console_errors)

    def navigate(self, url: str | os.PathLike, timeout: float = 30) -> None:
        """Load `url` (a path is turned into a file:// URL) and wait for its `load` event."""
        url = _as_url(url)
        result = self._call("Page.navigate", {"url": url}, timeout)
        if result.get("errorText"):
            raise BrowserError(f"could not load {url}: {result['errorText']}")
        loader = result.get("loaderId")
        if loader is None:  # a same-document navigation: nothing more to load
            return

        def loaded() -> bool:
            if self._gone:
                raise BrowserError(f"loading {url}: {self._gone}")
            return loader in self._loaded

        self._connection.wait_until(loaded, timeout, f"loading {url} ({timeout:g} s)")

    def evaluate(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate a JavaScript expression in the page, awaiting it if it is a promise, and
        return its value as JSON (DOM nodes and functions come back as {} or None). Raises
        JavaScriptError with the exception's text if it throws or its promise is rejected."""
        params = {
            "expression": expression,
            "returnByValue": True,
            "awaitPromise": True,
            "userGesture": True,
        }
        try:
            result = self._call("Runtime.evaluate", params, timeout)
        except TimeoutError as e:
            raise TimeoutError(f"evaluating {_short(expression)!r}: {e}") from None
        if "exceptionDetails" in result:
            text = _exception_text(result["exceptionDetails"])
            raise JavaScriptError(f"{_short(expression)!r} threw: {text}")
        return _remote_value(result.get("result", {}))

    def wait_for(self, expression: str, timeout: float = 30, interval: float = 0.1) -> Any:
        """Evaluate `expression` until it is truthy (in JavaScript's sense) and return its
        value; TimeoutError after `timeout` seconds. An exception in it is raised at once."""
        body = expression.strip().rstrip(";")
        probe = (
            "(async () => { const harnessValue = await (\n"
            f"{body}\n"
            "); return [!!harnessValue, harnessValue]; })()"
        )
        deadline = time.monotonic() + timeout
        last = None
        while True:
            left = deadline - time.monotonic()
            try:
                ok, last = self.evaluate(probe, timeout=max(left, 0.5))
            except TimeoutError:
                ok = False
            if ok:
                return last
            if time.monotonic() + interval > deadline:
                raise TimeoutError(
                    f"{_short(expression)!r} still not truthy after {timeout:g} s "
                    f"(last value: {last!r})"
                )
            time.sleep(interval)

    def screenshot(self, path: str | os.PathLike, full_page: bool = False) -> Path:
        """Write a PNG of the viewport (or the whole page) to `path`; returns the path."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self._call("Page.captureScreenshot", params)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Close the tab (nothing if it or the browser is already gone)."""
        if self._browser._connection is None:
            return
        if not self._gone:
            self._gone = "the page was closed"
            with contextlib.suppress(BrowserError, TimeoutError):
                self._connection.call("Target.closeTarget", {"targetId": self.target_id}, timeout=5)
        self._connection.handlers.pop(self.session_id, None)


def _as_url(url: str | os.PathLike) -> str:
    if isinstance(url, os.PathLike) or ":" not in str(url):
        return Path(url).resolve().as_uri()
    return str(url)


class Browser:
    """A headless Chromium with its own temporary profile. Use it as a context manager: on
    exit (also on error) the browser's process group is killed and the profile removed."""

    def __init__(
        self,
        executable: str | None = None,
        viewport: tuple[int, int] = (1280, 900),
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 60,
    ):
        executable = executable or find_chromium()
        if executable is None:
            raise BrowserError(f"no browser on PATH (tried {', '.join(CHROMIUM_NAMES)})")
        self.viewport = viewport
        self._metrics = {
            "width": viewport[0],
            "height": viewport[1],
            "deviceScaleFactor": 1,
            "mobile": False,
        }
        self.tmp_dir = Path(tempfile.mkdtemp(prefix="apertus-browser-"))
        self.profile_dir = self.tmp_dir / "profile"
        self.log_path = self.tmp_dir / "chromium.log"
        self.process: subprocess.Popen | None = None
        self._connection: _Connection | None = None
        try:
            self._start(executable, extra_args, start_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, executable: str, extra_args: tuple[str, ...], timeout: float) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # The child's ends, moved above fds 3 and 4 so that placing one cannot overwrite the other.
        high = [_dup_above(fd, _CHILD_WRITE_FD) for fd in (to_child_r, from_child_w)]
        os.close(to_child_r)
        os.close(from_child_w)

        def map_fds() -> None:  # in the child, between fork and exec
            os.dup2(high[0], _CHILD_READ_FD)  # dup2 leaves the copies inheritable
            os.dup2(high[1], _CHILD_WRITE_FD)

        cmd = [executable, *_flags(self.profile_dir, self.viewport), *extra_args, "about:blank"]
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # close_fds would close 3 and 4 after preexec_fn; every other fd we hold is
                    # close-on-exec (PEP 446), so nothing else leaks.
                    close_fds=False,
                    preexec_fn=map_fds,
                    start_new_session=True,  # its own process group, killed as a whole
                )
        except BaseException:
            os.close(to_child_w)
            os.close(from_child_r)
            raise
        finally:
            for fd in high:
                os.close(fd)
        self._connection = _Connection(to_child_w, from_child_r, self._describe_death)
        self.version = self._connection.call("Browser.getVersion", timeout=timeout)

    def _describe_death(self) -> str:
        status = "still running"
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                status = f"exit status {self.process.wait(timeout=1)}"
        try:
            log = self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            log = ""
        return f"chromium {status}; its output ends with:\n{log}"

    def open(self, url: str | os.PathLike, timeout: float = 30) -> Page:
        """A new tab showing `url` (a path is turned into a file:// URL), once it has loaded."""
        if self._connection is None:
            raise BrowserError("the browser is closed")
        call = self._connection.call
        target = call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = call(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, timeout=timeout
        )["sessionId"]
        page = Page(self, target, session)
        try:
            for method, params in (
                ("Runtime.enable", {}),
                ("Page.enable", {}),
                ("Page.setLifecycleEventsEnabled", {"enabled": True}),
                # --window-size counts the (invisible) browser UI in new headless: fix the
                # viewport itself.
                ("Emulation.setDeviceMetricsOverride", self._metrics),
            ):
                page._call(method, params, timeout)
            page.navigate(url, timeout)
        except BaseException:
            page.close()
            raise
        return page

    def close(self) -> None:
        """Stop the browser (politely, then by killing its process group) and remove the
        profile. Safe to call more than once."""
        connection, self._connection = self._connection, None
        process = self.process
        if connection is not None and process is not None and process.poll() is None:
            failures = (BrowserError, TimeoutError, OSError, subprocess.TimeoutExpired)
            with contextlib.suppress(*failures):
                connection.send("Browser.close")
                process.wait(timeout=5)
        if connection is not None:
            connection.close()
        if process is not None:
            # The whole process group, so that no renderer or helper outlives the test.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _dup_above(fd: int, floor: int) -> int:
    """A close-on-exec copy of `fd` numbered above `floor`."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor + 1)
