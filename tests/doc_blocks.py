"""Run the code blocks of a Markdown page as a reader would (tests/test_docs_blocks.py runs README.md
and every docs/**/*.md page in CI with ``python -m pytest -m docs``).

Conventions (for the authors of the pages):

* ```` ```bash ```` (also ``sh``, ``shell``) blocks run with ``bash -euo pipefail``, in page order, each in its own
  process group, in a fresh working directory per page that starts with copies of the repository's
  ``examples/``, ``benchmarks/`` and ``tools/`` (as in a clone's root); a page's blocks share it, not
  their shell state (``cd``, variables).
* ```` ```python ```` blocks run in page order in one namespace per page (one Python process; cwd = that
  directory); tracebacks name the page and its line numbers.
* Blocks of any other language (``text``, ``toml``, ``json``, ``yaml``, ``ini``, ``csv``, none, ...) are not
  executed; an untagged or ``console`` block with a line that is a command (``$ ...``, ``topofl ...``,
  ``OMP_NUM_THREADS=1 topofl ...``, ``pip install ...``) is refused: tag it ``bash`` (run) or ``text`` (shown,
  never run); so is a block of a shell or session language the runner does not run (``zsh``, ``fish``,
  ``pycon``, ``powershell``, ...) unless skipped. Pandoc's ``{.bash}`` info strings are read as ``bash``.
* Annotations, each an HTML comment on its own line, on the lines just before a block:

  - ``<!-- ci: file NAME -->`` (before a block that is not executed) writes its text to NAME in the
    page's directory;
  - ``<!-- ci: append ARGS -->`` (before a bash block) appends ARGS to every line of the block that starts
    with ``topofl`` or ``python -m topofl`` (before a trailing ``# comment``; at the end of a ``\\``
    continued command); refused on such a line with a pipe, ``&&``, ``||`` or ``;``;
  - ``<!-- ci: skip REASON -->`` skips the block; the reason is mandatory and is printed;

  and anywhere in the page, ``<!-- ci: timeout SECONDS -->`` sets the page's time budget (default
  :data:`DEFAULT_BUDGET`), which every block's timeout counts down.
* Environment: ``FLWR_TELEMETRY_ENABLED=0``, ``MPLBACKEND=Agg``, no ``MLFLOW_*`` variable; every process a block starts is
  stopped when the block (bash) or the page (python) ends.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: seconds a page's blocks may take together unless ``<!-- ci: timeout SECONDS -->`` says otherwise
DEFAULT_BUDGET = 600.0
#: the info-string languages whose blocks run
BASH = frozenset({"bash", "sh", "shell"})
PYTHON = frozenset({"python", "py", "python3"})
#: what a page's working directory starts with: copies of these repository folders
COPIED = ("examples", "benchmarks", "tools")
REPO = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_ANNOTATION = re.compile(r"^\s*<!--\s*ci:\s*(?P<key>[A-Za-z-]+)(?:\s+(?P<args>.*?))?\s*-->\s*$")
_KEYS = ("file", "append", "skip", "timeout")
_TOPOFL_LINE = re.compile(r"^\s*(topofl(\s|$)|python3? -m topofl(\.cli)?(\s|$))")
#: an untagged or ``console`` block with a line like this (after environment assignments such as
#: ``OMP_NUM_THREADS=1``) holds commands a reader would run, so must say how it runs
_COMMAND = re.compile(r"^(\$ |([A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(topofl(\s|$)|python3? |pip3? install|flwr |flower-super))")
_UNTAGGED = frozenset({"", "console", "shell-session", "terminal"})
#: languages of commands or sessions the runner does not run: refused (tag them bash/python, or text)
_UNRUN = frozenset({"zsh", "fish", "ksh", "csh", "tcsh", "dash", "pwsh", "powershell", "ps1", "bat", "cmd", "batch",
                    "pycon", "ipython", "ipython3", "python-console", "doscon", "psconsole"})
#: a pipe, ``&&``, ``||`` or ``;``: after one of these, ``ci: append`` would extend the wrong command
_CHAIN = re.compile(r"\||&&|;")


class DocBlockError(ValueError):
    """A page breaks the conventions (an annotation without its argument, on the wrong block, ...)."""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page and the annotations just before it."""

    line: int          # 1-based line of the opening fence
    lang: str          # the info string's first word, lower case ("" when none)
    text: str          # the content, the fence's indentation removed
    file: str | None = None
    append: str | None = None
    skip: str | None = None

    @property
    def kind(self) -> str:
        """``"bash"``, ``"python"`` or ``"text"`` (not executed)."""
        return "bash" if self.lang in BASH else "python" if self.lang in PYTHON else "text"

    @property
    def first_line(self) -> str:
        """The block's first non-empty line (what a failure message quotes)."""
        return next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")

    def script(self) -> str:
        """The text to execute: ``append`` applied (:func:`append_to_topofl_lines`)."""
        return append_to_topofl_lines(self.text, self.append) if self.append else self.text


@dataclass
class Page:
    """A page's blocks in order and its time budget."""

    path: Path
    blocks: list[Block]
    budget: float = DEFAULT_BUDGET


def parse_page(text: str, path: Path | str = "<page>") -> Page:
    """The fenced code blocks of Markdown ``text`` with their annotations; :class:`DocBlockError` (naming
    ``path`` and the line) when an annotation is malformed or misplaced.
    """
    where = str(path)
    lines = text.splitlines()
    blocks: list[Block] = []
    budget: float | None = None
    pending: dict[str, tuple[int, str]] = {}   # annotations waiting for their block: key -> (line, args)
    i = 0
    while i < len(lines):
        line = lines[i]
        ann = _ANNOTATION.match(line)
        if ann:
            key, args = ann["key"].lower(), (ann["args"] or "").strip()
            if key not in _KEYS:
                raise DocBlockError(f"{where}:{i + 1}: unknown annotation 'ci: {key}' (known: {', '.join(_KEYS)})")
            if not args:
                what = {"skip": "a reason", "file": "a file name", "append": "the arguments", "timeout": "seconds"}[key]
                raise DocBlockError(f"{where}:{i + 1}: 'ci: {key}' needs {what}")
            if key == "timeout":
                if budget is not None:
                    raise DocBlockError(f"{where}:{i + 1}: a second 'ci: timeout' (the page has one budget)")
                try:
                    budget = float(args)
                except ValueError:
                    budget = float("nan")
                if not budget > 0 or budget == float("inf"):
                    raise DocBlockError(f"{where}:{i + 1}: 'ci: timeout {args}': seconds must be a positive number")
            else:
                if key in pending:
                    raise DocBlockError(f"{where}:{i + 1}: a second 'ci: {key}' before the same block")
                pending[key] = (i + 1, args)
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if pending and line.strip():
                key, (at, _) = min(pending.items(), key=lambda kv: kv[1][0])
                raise DocBlockError(f"{where}:{at}: 'ci: {key}' is not followed by a code block")
            i += 1
            continue
        indent, mark = len(fence["indent"]), fence["fence"]
        lang = _language(fence["info"])
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = _FENCE.match(lines[j])
            if close and close["fence"][0] == mark[0] and len(close["fence"]) >= len(mark) and not close["info"].strip():
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
            j += 1
        else:
            raise DocBlockError(f"{where}:{i + 1}: the code block is never closed")
        block = Block(line=i + 1, lang=lang, text="\n".join(body) + ("\n" if body else ""),
                      **{k: a for k, (_, a) in pending.items()})
        _check(block, where, pending)
        blocks.append(block)
        pending = {}
        i = j + 1
    if pending:
        key, (at, _) = min(pending.items(), key=lambda kv: kv[1][0])
        raise DocBlockError(f"{where}:{at}: 'ci: {key}' is not followed by a code block")
    return Page(Path(path), blocks, DEFAULT_BUDGET if budget is None else budget)


def _language(info: str) -> str:
    """The language of a fence's info string: its first word (``bash`` of ``bash title=x``), or its
    first class in Pandoc's attribute form (``bash`` of ``{.bash .numberLines}``), lower case.
    """
    info = info.strip()
    if info.startswith("{"):
        cls = re.search(r"\.([A-Za-z0-9_+-]+)", info)
        return cls[1].lower() if cls else ""
    return (info.split() or [""])[0].rstrip(",").lower()


def _unquoted(code: str) -> str:
    """``code`` with its quoted strings emptied (so that a ``|`` inside quotes is not a pipe)."""
    return re.sub(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"", "''", code)


def _check(block: Block, where: str, pending: dict[str, tuple[int, str]]) -> None:
    """Refuse an annotation on a block it does not apply to, a block of commands that does not say how it
    runs, and a block in a shell-like language the runner does not run.
    """
    if block.lang in _UNRUN and block.skip is None:
        raise DocBlockError(f"{where}:{block.line}: a {block.lang} block: the runner runs bash and python blocks; "
                            "tag it bash or python (run in CI; <!-- ci: skip REASON --> when it cannot be) or text "
                            "(shown, never run)")
    if block.file is not None:
        if block.kind != "text":
            raise DocBlockError(f"{where}:{pending['file'][0]}: 'ci: file' goes before a block that is not executed "
                                f"(this one is {block.lang})")
        name = Path(block.file)
        if name.is_absolute() or ".." in name.parts:
            raise DocBlockError(f"{where}:{pending['file'][0]}: 'ci: file {block.file}': a name inside the page's "
                                "directory")
    command = next((ln.strip() for ln in block.text.splitlines() if _COMMAND.match(ln.strip())), None)
    if block.kind == "text" and block.lang in _UNTAGGED and block.file is None and command is not None:
        raise DocBlockError(f"{where}:{block.line}: {'a ' + block.lang if block.lang else 'an untagged'} block of commands "
                            f"({command[:40]!r}): tag it bash (run in CI; <!-- ci: skip REASON --> when it "
                            "cannot be) or text (shown, never run)")
    if block.append is not None and block.kind != "bash":
        raise DocBlockError(f"{where}:{pending['append'][0]}: 'ci: append' goes before a bash block "
                            f"(this one is {block.lang or 'untagged'})")
    if block.append is not None:
        for ln in block.text.splitlines():
            if _TOPOFL_LINE.match(ln) and _CHAIN.search(_unquoted(_split_comment(ln)[0])):
                raise DocBlockError(f"{where}:{pending['append'][0]}: 'ci: append' on a command with a pipe, '&&', "
                                    f"'||' or ';' ({ln.strip()[:60]!r}): the arguments would not go to topofl; "
                                    "put the topofl command on its own line")


def _split_comment(line: str) -> tuple[str, str]:
    """``line`` as (code, comment): the comment starts at an unquoted ``#`` after a blank."""
    quote = ""
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k], line[k:]
    return line, ""


def append_to_topofl_lines(text: str, args: str) -> str:
    """``text`` with ``args`` appended to each command that starts with ``topofl`` or ``python -m topofl``:
    before its trailing comment, and on the last line of a ``\\``-continued command.
    """
    lines = text.split("\n")
    out = list(lines)
    k = 0
    while k < len(lines):
        start = k
        while _split_comment(lines[k])[0].rstrip().endswith("\\") and k + 1 < len(lines):
            k += 1   # the command goes on: its arguments end on line k
        if _TOPOFL_LINE.match(lines[start]):
            code, comment = _split_comment(lines[k])
            code = code.rstrip()
            out[k] = f"{code} {args}" + (f"  {comment}" if comment else "")
        k += 1
    return "\n".join(out)


@dataclass
class PageResult:
    """What running a page did: the blocks skipped (with reasons) and the first failure, if any."""

    skipped: list[tuple[Block, str]] = field(default_factory=list)
    ran: list[Block] = field(default_factory=list)
    failure: str | None = None


def environment() -> dict[str, str]:
    """The blocks' environment: this process's, with telemetry off and a non-interactive Matplotlib."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}   # a page says its own store
    env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", MPLBACKEND="Agg", PYTHONUNBUFFERED="1",
               COLUMNS=env.get("COLUMNS", "120"))
    return env


def prepare_directory(directory: Path, repo: Path = REPO) -> Path:
    """Make ``directory`` a page's fresh working directory: copies of the repository's :data:`COPIED` folders."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (repo / name).is_dir():
            shutil.copytree(repo / name, directory / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return directory


def _group_gone(proc: subprocess.Popen, wait: float) -> bool:
    """Whether ``proc``'s process group is empty within ``wait`` seconds (``proc`` itself reaped meanwhile)."""
    deadline = time.monotonic() + wait
    while True:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop every process of ``proc``'s process group (SIGTERM, then SIGKILL after 5 s) and reap ``proc``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if _group_gone(proc, 5.0):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover (killed above)
        pass


_FAILED = "[ci] exit "
_TRAP = "trap 'echo \"[ci] exit $? at page line $((LINENO + OFFSET)): $BASH_COMMAND\" >&2' ERR\n"

_WORKER = r"""
import sys, traceback
namespace = {"__name__": "__main__"}
status = open(sys.argv[1], "a")
for request in sys.stdin:
    path, label, first = request.rstrip("\n").split("\t")
    source = "\n" * (int(first) - 1) + open(path).read()   # line numbers are the page's
    ok = True
    try:
        exec(compile(source, label, "exec"), namespace)
    except SystemExit as exc:
        ok = exc.code in (None, 0)
    except BaseException:
        traceback.print_exc()
        ok = False
    sys.stdout.flush(); sys.stderr.flush()
    status.write("ok\n" if ok else "fail\n"); status.flush()
"""


class _Python:
    """The page's Python process: blocks sent one at a time, executed in one namespace."""

    def __init__(self, directory: Path, log: Path, env: dict[str, str]) -> None:
        self.status = directory / ".ci-python-status"
        self.status.write_text("")
        self.out = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(self.status)], cwd=directory, env=env,
                                     stdin=subprocess.PIPE, stdout=self.out, stderr=subprocess.STDOUT,
                                     start_new_session=True, text=True)
        self.done = 0

    def run(self, path: Path, label: str, first: int, timeout: float) -> str | None:
        """Execute the code in ``path``; ``None`` when it succeeded, else why not."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{path}\t{label}\t{first}\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answers = self.status.read_text().split()
            if len(answers) > self.done:
                self.done += 1
                return None if answers[self.done - 1] == "ok" else "raised an exception"
            if self.proc.poll() is not None:
                return f"the Python process exited ({self.proc.returncode})"
            time.sleep(0.05)
        return f"timed out after {timeout:.0f} s"

    def close(self) -> None:
        """End the process and everything it started."""
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:  # pragma: no cover
                pass
        _stop_group(self.proc)
        self.out.close()


def run_page(page: Page, directory: Path, label: str | None = None, tail: int = 40) -> PageResult:
    """Run ``page``'s blocks in order in ``directory`` (:func:`prepare_directory` first; see the module's
    conventions); stop at the first
    failure, whose message names the page, the block's line and first line, and the output's last ``tail`` lines.
    """
    label = label or str(page.path)
    prepare_directory(directory)
    env = environment()
    result = PageResult()
    log = directory / ".ci-output.log"
    log.touch()
    python: _Python | None = None
    deadline = time.monotonic() + page.budget
    try:
        for n, block in enumerate(page.blocks):
            if block.skip is not None:
                result.skipped.append((block, block.skip))
                continue
            if block.file is not None:
                target = directory / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text)
                continue
            if block.kind == "text":
                continue
            left = deadline - time.monotonic()
            start = log.stat().st_size
            script = directory / f".ci-block-{n}.{'sh' if block.kind == 'bash' else 'py'}"
            # a bash block says which of its commands failed, with that command's line in the page
            script.write_text(_TRAP.replace("OFFSET", str(block.line - 1)) + block.script() if block.kind == "bash"
                              else block.script())
            if left <= 0:
                why: str | None = f"not started: the page's budget of {page.budget:.0f} s is spent"
            elif block.kind == "bash":
                why = _run_bash(script, directory, env, log, left)
            else:
                python = python or _Python(directory, log, env)
                why = python.run(script, label, block.line + 1, left)
            result.ran.append(block)
            if why is not None:
                if "timed out" in why or "budget" in why:
                    why += f" (the page's budget is {page.budget:.0f} s; <!-- ci: timeout SECONDS --> sets it)"
                with log.open("rb") as f:
                    f.seek(start)
                    lines = f.read().decode("utf-8", "replace").splitlines()
                failed = next((ln for ln in lines if ln.startswith(_FAILED)), None)
                where = f"{label}:{block.line}: {block.lang} block"
                if failed and why.startswith("exited"):   # "[ci] exit 2 at page line 48: topofl compare ..."
                    code, command = failed[len(_FAILED):].split(": ", 1)
                    rc, at = code.split(" at page line ")
                    head = f"{where}, line {at}: `{command}` exited {rc.strip()}"
                else:
                    head = f"{where} {why}: {block.first_line}"
                output = lines[-tail:]
                shown = "\n".join(output) if output else "(no output)"
                result.failure = f"{head}\n--- last {len(output)} lines of its output ---\n{shown}"
                break
    finally:
        if python is not None:
            python.close()
    return result


def _run_bash(script: Path, directory: Path, env: dict[str, str], log: Path, timeout: float) -> str | None:
    """Run ``script`` with ``bash -euo pipefail`` in its own process group; stop the group afterwards."""
    with log.open("ab") as out:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", str(script)], cwd=directory, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            _stop_group(proc)   # background processes the block left running too
    if rc is None:
        return f"timed out after {timeout:.0f} s"
    return None if rc == 0 else f"exited {rc}"
